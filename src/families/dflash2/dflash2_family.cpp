#include "dflash2_family.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "config_fields.h"
#include "head_rank_default.h"
#include "dflash2_cost.h"
#include "dflash2_drafter_settings.h"
#include "dflash2_engines.h"
#include "dflash2_train_settings.h"
#include "strict_json.h"

namespace dflash::families {
namespace {

using drafter::DrafterConfig;

class DFlash2Family final : public drafter::Family {
 public:
  const char* name() const override { return "dflash2"; }
  const char* display_name() const override { return "DFlash2"; }
  const char* architecture() const override { return "DFlash2DraftModel"; }
  const char* draft_vocab_refusal() const override {
    return "the selector spans the full vocabulary: its codebooks and top-K index the target's vocabulary, and no "
           "source defines a draft vocabulary for it";
  }
  drafter::FamilySettingKeys setting_keys() const override {
    return {{}, {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"}};
  }
  // All four in dflash_config, required (vLLM reads them only there). z-lab's optional output_multiplier /
  // final_logit_softcapping / input_embedding_scale are read at their neutral values only: training and evaluation
  // here do not apply them yet.
  std::unique_ptr<drafter::FamilySettings> read_settings(const nlohmann::json&, const nlohmann::json& dc,
                                                         const std::string& where) const override {
    auto required = [&](const char* k) {
      const std::string field = std::string("dflash_config.") + k;
      if (!dc.contains(k) || dc.at(k).is_null()) drafter::fail_field(where, field, "an integer", "nothing (missing)");
      const auto n = io::json_integer_in(dc.at(k), -2147483648LL, 2147483647LL);
      if (!n) drafter::fail_field(where, field, "an integer", drafter::shown_field(dc.at(k)));
      return *n;
    };
    drafter::DFlash2Settings s;
    s.conv_kernel_size = required("conv_kernel_size");
    s.conv_group_size = required("conv_group_size");
    s.selector_rank = required("selector_rank");
    s.selector_top_k = required("selector_top_k");
    for (const auto& [k, neutral] : {std::pair<const char*, double>{"output_multiplier", 1.0},
                                     {"input_embedding_scale", 1.0}, {"final_logit_softcapping", 0.0}}) {
      if (!dc.contains(k) || dc.at(k).is_null()) continue;
      const auto& v = dc.at(k);
      if (!v.is_number() || v.get<double>() != neutral)
        drafter::fail_field(where, std::string("dflash_config.") + k,
                            nlohmann::json(neutral).dump() + " or absent (other values are not supported yet)",
                            drafter::shown_field(v));
    }
    return std::make_unique<DFlash2DrafterSettings>(s);
  }
  std::shared_ptr<const drafter::FamilySettings> default_settings(int64_t hidden_size) const override {
    return dflash2_default_settings(hidden_size);
  }
  std::vector<const char*> remote_code_files() const override { return {"dflash.py", "dflash2.py"}; }
  const char* auto_model_class() const override { return "dflash2.DFlash2DraftModel"; }
  void describe_for_engines(const DrafterConfig& c, drafter::ExportTraits& t) const override {
    t.hidden_size = c.hidden_size;
    t.selector_top_k = dflash2_settings(c).selector_top_k;
  }

  // A selector_rank not given follows the drafter's hidden size (head_rank_default.h).
  void shape_defaults(int64_t hidden_size, nlohmann::json& out) const override {
    out["selector_rank"] = drafter::default_head_rank(hidden_size);
  }
  // --- planner hooks (dflash2_cost.cpp) ---
  const drafter::FamilyCost& cost() const override { return dflash2_cost(); }
  // --- export hooks: the serving engines (dflash2_engines.cpp) ---
  std::vector<drafter::EngineRule> engine_rules() const override { return dflash2_engine_rules(); }
  // --- train settings (dflash2_train_settings.cpp) ---
  const drafter::FamilyTrainSettings& train_settings() const override { return dflash2_train_settings(); }
};

}  // namespace

const drafter::Family& dflash2_family() {
  static const DFlash2Family family;
  return family;
}

}  // namespace dflash::families
