#include "dspark_family.h"

#include <nlohmann/json.hpp>

#include "config_fields.h"
#include "head_rank_default.h"
#include "dspark_cost.h"
#include "dspark_drafter_settings.h"
#include "dspark_engines.h"
#include "dspark_train_settings.h"

namespace dflash::families {
namespace {

using drafter::DrafterConfig;

class DSparkFamily final : public drafter::Family {
 public:
  const char* name() const override { return "dspark"; }
  const char* display_name() const override { return "DSpark"; }
  // DeepSpec's native name, the one SGLang and vLLM load (vLLM's DSparkDraftModel is a DeepSeek-V4 class).
  const char* architecture() const override { return "Qwen3DSparkModel"; }
  const char* draft_vocab_refusal() const override {
    return "not supported yet: vLLM and speculators serve it with lm_head and markov_w2 over the K draft tokens and "
           "markov_w1 over the target's vocabulary, which train, eval and export do not implement";
  }
  drafter::FamilySettingKeys setting_keys() const override {
    return {{"markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"}, {}};
  }
  bool flat_dflash_config() const override { return true; }
  // SGLang requires markov_rank and markov_head_type, so they are required here too.
  std::unique_ptr<drafter::FamilySettings> read_settings(const nlohmann::json& j, const nlohmann::json&,
                                                         const std::string& where) const override {
    drafter::DSparkHeads h;
    h.markov_rank = drafter::int_field(j, "markov_rank", where, true, 0);
    if (!j.contains("markov_head_type"))
      drafter::fail_field(where, "markov_head_type", drafter::kMarkovHeadTypeSpellings, "nothing (missing)");
    const auto& t = j.at("markov_head_type");
    const auto type = t.is_string() ? drafter::markov_head_type_from_text(t.get<std::string>()) : std::nullopt;
    if (!type) drafter::fail_field(where, "markov_head_type", drafter::kMarkovHeadTypeSpellings, drafter::shown_field(t));
    h.markov_head_type = *type;
    h.enable_confidence_head = drafter::bool_field(j, "enable_confidence_head", where, true);
    h.confidence_head_with_markov = drafter::bool_field(j, "confidence_head_with_markov", where, true);
    h.validate(where);
    return std::make_unique<DSparkDrafterSettings>(h);
  }
  std::shared_ptr<const drafter::FamilySettings> default_settings(int64_t hidden_size) const override {
    return dspark_default_settings(hidden_size);
  }
  std::vector<const char*> remote_code_files() const override { return {"dflash.py", "dspark.py"}; }
  const char* auto_model_class() const override { return "dspark.Qwen3DSparkModel"; }
  void describe_for_engines(const DrafterConfig& c, drafter::ExportTraits& t) const override {
    const DSparkDrafterSettings& h = dspark_settings(c);
    t.markov_head_type = drafter::markov_head_type_name(h.markov_head_type);
    t.markov_rank = h.markov_rank;
    t.confidence_head = h.enable_confidence_head;
    t.confidence_with_markov = h.confidence_head_with_markov;
  }
  // DeepSpec's Qwen3DSparkModel asserts config.num_anchors (its training forward samples that many).
  bool export_needs_num_anchors() const override { return true; }

  // A markov_rank not given follows the drafter's hidden size (head_rank_default.h).
  void shape_defaults(int64_t hidden_size, nlohmann::json& out) const override {
    out["markov_rank"] = drafter::default_head_rank(hidden_size);
  }
  // --- planner hooks (dspark_cost.cpp) ---
  const drafter::FamilyCost& cost() const override { return dspark_cost(); }
  // --- eval hooks ---
  // All B block outputs are drafts (slot 0 predicts the token after the last committed one).
  int64_t drafts_per_cycle(const DrafterConfig& c) const override { return c.block_size; }
  bool has_confidence_cut() const override { return true; }
  // --- export hooks: the serving engines (dspark_engines.cpp) ---
  std::vector<drafter::EngineRule> engine_rules() const override { return dspark_engine_rules(); }
  // --- train settings (dspark_train_settings.cpp) ---
  const drafter::FamilyTrainSettings& train_settings() const override { return dspark_train_settings(); }
};

}  // namespace

const drafter::Family& dspark_family() {
  static const DSparkFamily family;
  return family;
}

}  // namespace dflash::families
