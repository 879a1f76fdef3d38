// A drafter family as a plug-in: what the layers ask of a family, so that adding one is a folder in src/families
// plus one line in its registration list (families_list.h), and no other file names it
// (docs/ARCHITECTURE.md "A drafter family"). Declared here because drafter-layer code calls these hooks; each
// family implements them in its own folder, a layer above. eval/proposer.h is the model: an interface below, the
// implementations above. Torch-free.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "drafter_config.h"
#include "serving_engines.h"

namespace dflash::drafter {

class FamilyCost;  // family_cost.h

// A family's own config.json settings (its extras: DSpark's heads, DFlash2's convs and selector), read by
// Family::read_settings, held by DrafterConfig::family_settings (immutable, shared by copies of the config) and read
// by the family's own code through family_settings_as<T> (each family wraps it: dspark_settings(c)).
class FamilySettings {
 public:
  virtual ~FamilySettings() = default;
  // Throws std::invalid_argument "<where>: field '<name>': expected ..., got ..."; `c` is the drafter they belong to
  // (bounds that depend on its shape).
  virtual void validate(const DrafterConfig& c, const std::string& where) const = 0;
  // Adds the settings to config.json `top` being written for `c` (top["dflash_config"] is there already).
  virtual void write(const DrafterConfig& c, nlohmann::json& top) const = 0;
  // The same settings (of the same type, every value equal): DrafterConfig's value semantics.
  virtual bool equals(const FamilySettings& other) const = 0;
};

// Whether two configs hold the same family settings (both none, or equal values).
inline bool same_family_settings(const DrafterConfig& a, const DrafterConfig& b) {
  if (!a.family_settings || !b.family_settings) return !a.family_settings && !b.family_settings;
  return a.family_settings->equals(*b.family_settings);
}

// The settings `c` holds, as family `display_name`'s type T. std::logic_error naming the family when `c` holds none
// or another family's: a config built in code without them, not a user's error (parse_drafter_config and train's
// drafter always set them).
template <class T>
const T& family_settings_as(const DrafterConfig& c, const char* display_name) {
  if (const auto* s = dynamic_cast<const T*>(c.family_settings.get())) return *s;
  throw std::logic_error(std::string("a drafter config of family '") + c.family.name() + "' holds " +
                         (c.family_settings ? "another family's settings" : "no family settings") + " where " +
                         display_name + "'s were expected (set DrafterConfig::family_settings: the family's "
                         "read_settings or default_settings)");
}

// The config.json keys a family's settings take, which a config of any other family must not carry (it would be
// read as a drafter without the family's modules).
struct FamilySettingKeys {
  std::vector<std::string> top_level;
  std::vector<std::string> in_dflash_config;
};

class FamilyTrainSettings;  // family_train_settings.h

class Family {
 public:
  virtual ~Family() = default;
  // `drafter_family: NAME` / `--drafter-family NAME`.
  // Names are string literals: they outlive every caller (family_ref.h hands them out as const char*).
  virtual const char* name() const = 0;
  // As messages write it ("DSpark").
  virtual const char* display_name() const = 0;
  // config.json's architectures[0].
  virtual const char* architecture() const = 0;
  // Why a draft vocabulary (draft_vocab_size) is refused with this family, in the words train, plan and bench step
  // use; empty: the family has one.
  virtual const char* draft_vocab_refusal() const { return ""; }

  virtual FamilySettingKeys setting_keys() const { return {}; }
  // true: a config.json without dflash_config has its keys (mask_token_id, target_layer_ids) at the top level, as
  // DeepSpec writes DSpark drafters.
  virtual bool flat_dflash_config() const { return false; }
  // The family's settings from config.json (`top` and its dflash_config object, which is `top` for a flat config);
  // nullptr when the family has none, or when none of its keys is given and it takes its default_settings.
  // Throws std::invalid_argument naming `where` and the field.
  virtual std::unique_ptr<FamilySettings> read_settings(const nlohmann::json& /*top*/,
                                                        const nlohmann::json& /*dflash_config*/,
                                                        const std::string& /*where*/) const {
    return nullptr;
  }
  // The family's settings for a drafter of `hidden_size` given none: the sources' defaults, a setting that follows
  // the shape (shape_defaults) at its value for this size. nullptr: the family has no settings. A DrafterConfig of a
  // family with settings always holds an object of this type (DrafterConfig::validate checks it).
  virtual std::shared_ptr<const FamilySettings> default_settings(int64_t /*hidden_size*/) const { return nullptr; }

  // Export traits, as data: the modelling files written beside the weights (each in some family's folder,
  // src/families/NAME/remote_code/, which export compiles in; dflash.py first: every family builds on it; registering
  // the family adds them to an export folder's files, util/output_folder.h) and the class auto_map's AutoModel names
  // ("dspark.Qwen3DSparkModel").
  virtual std::vector<const char*> remote_code_files() const { return {"dflash.py"}; }
  virtual const char* auto_model_class() const = 0;
  // What of `c` an engine may read differently from the trainer (serving_engines.h), beyond what every family has
  // (t.family, draft vocabulary, sliding layers, target layers: filled by the caller).
  virtual void describe_for_engines(const DrafterConfig& /*c*/, ExportTraits& /*t*/) const {}
  // true: the exported config.json must carry the run's num_anchors (the family's model class asserts it).
  virtual bool export_needs_num_anchors() const { return false; }

  // --- settings that follow the drafter's shape ---
  // The family's settings whose default depends on the drafter's hidden size (a head rank: head_rank_default.h),
  // added to `out` as config key -> value; a drafter built from the target takes them where they were not given.
  virtual void shape_defaults(int64_t /*hidden_size*/, nlohmann::json& /*out*/) const {}

  // --- planner hooks (family_cost.h) ---
  // What the family adds to a training step's memory and FLOPs, as `plan` and `bench step` count them; the default
  // (family_cost.cpp) adds nothing: the DFlash backbone every family shares, which the planner counts itself.
  virtual const FamilyCost& cost() const;

  // --- eval hooks (the model's hooks are torch-side: family_model.h, a registry of their own) ---
  // Drafts one speculative cycle proposes at most (the target verifies one token more): B - 1 (slot 0 is the last
  // committed token), or B for a family whose block outputs are all drafts.
  virtual int64_t drafts_per_cycle(const DrafterConfig& c) const { return c.block_size - 1; }
  // true: eval's --confidence-threshold (the cumulative confidence cut of docs/DSPARK.md "Evaluation") applies.
  virtual bool has_confidence_cut() const { return false; }

  // --- export hooks: the serving engines ---
  // The family's row per engine that serves it (serving_engines.h), in any order; an engine without a row does not
  // serve the family. Default: none (a family no engine serves: export writes it, --engine refuses every engine).
  virtual std::vector<EngineRule> engine_rules() const { return {}; }

  // --- train settings (family_train_settings.h) ---
  // The family's own `dflash train` settings, which train's settings table adds to its own; the default
  // (family_train_settings.cpp) declares none.
  virtual const FamilyTrainSettings& train_settings() const;
};

}  // namespace dflash::drafter
