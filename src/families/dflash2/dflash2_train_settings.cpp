#include "dflash2_train_settings.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "family.h"
#include "number_range.h"

namespace dflash::families {
namespace {

std::string shown(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nlohmann::json(v).dump();
}

// alpha, as DSpark's loss weights (dspark_train_settings.cpp): [0, 1000] keeps alpha x a selector CE finite in fp32
// and bf16.
const util::NumberRange kSelectorLossWeightRange = util::closed(0, 1e3);

class DFlash2TrainSettings final : public drafter::FamilyTrainSettings {
 public:
  std::vector<drafter::TrainSettingField> fields() const override {
    const DFlash2TrainValues d;
    drafter::TrainSettingField rank{"selector_rank", "int", d.model.selector_rank,
                                    "dflash2: rank r of the candidate selector (codebooks [V, r])"};
    rank.follows_drafter_shape = true;  // shape_defaults: the hidden size's rank when not given
    drafter::TrainSettingField candidates{
        "selector_candidates", "str", drafter::selector_candidates_name(d.selector_candidates),
        "dflash2: gold token outside the top-K: strict (serving top-K, no gradient) | inject (replaces rank K)"};
    candidates.accepts = [](const std::string& s) { return drafter::selector_candidates_from_text(s).has_value(); };
    candidates.spellings = drafter::kSelectorCandidatesSpellings;
    return {{"conv_kernel_size", "int", d.model.conv_kernel_size, "dflash2: taps of each block convolution"},
            {"conv_group_size", "int", d.model.conv_group_size,
             "dflash2: channels sharing one dynamic conv coefficient (divides hidden_size)"},
            rank,
            {"selector_top_k", "int", d.model.selector_top_k,
             "dflash2: candidates K the selector ranks per drafted slot"},
            candidates,
            {"selector_stop_gradient", "bool", d.selector_stop_gradient,
             "dflash2: the selector loss trains only the selector (U and h detached)"},
            {"selector_loss_weight", "float", d.selector_loss_weight,
             "dflash2: alpha in L = L_unary + alpha L_selector"}};
  }

  void validate(const nlohmann::json& settings, bool /*trains*/) const override {
    const DFlash2TrainValues v = dflash2_train_values(settings);
    // Bounded as DSpark's loss weights are: 1e300 trained, overflowed the loss at step 1 and was blamed on RoPE.
    if (const auto e = util::out_of_range(v.selector_loss_weight, kSelectorLossWeightRange))
      throw std::invalid_argument("train config: 'selector_loss_weight' must be " + *e + ", got " +
                                  shown(v.selector_loss_weight));
    try {
      v.model.validate("train config", "", 0, 0);  // hidden and vocab sizes: checked with the drafter
    } catch (const std::invalid_argument& e) {
      std::string m = e.what();  // "train config: field 'x': expected ..." -> the train config's own wording
      const std::string from = "field '";
      if (const auto p = m.find(from); p != std::string::npos) m.replace(p, from.size(), "'");
      throw std::invalid_argument(m);
    }
  }
};

}  // namespace

const drafter::FamilyTrainSettings& dflash2_train_settings() {
  static const DFlash2TrainSettings settings;
  return settings;
}

DFlash2TrainValues dflash2_train_values(const nlohmann::json& settings) {
  DFlash2TrainValues v;
  v.model.conv_kernel_size = settings.at("conv_kernel_size").get<int64_t>();
  v.model.conv_group_size = settings.at("conv_group_size").get<int64_t>();
  v.model.selector_rank = settings.at("selector_rank").get<int64_t>();
  v.model.selector_top_k = settings.at("selector_top_k").get<int64_t>();
  const auto candidates = drafter::selector_candidates_from_text(settings.at("selector_candidates").get<std::string>());
  if (!candidates) throw std::logic_error("selector_candidates was not read by its spellings");
  v.selector_candidates = *candidates;
  v.selector_stop_gradient = settings.at("selector_stop_gradient").get<bool>();
  v.selector_loss_weight = settings.at("selector_loss_weight").get<double>();
  return v;
}

}  // namespace dflash::families
