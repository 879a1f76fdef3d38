#include "dflash2_train_settings.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "family_registry.h"
#include "head_rank_default.h"
#include "number_range.h"

namespace dflash::train {
namespace {

std::string shown(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nlohmann::json(v).dump();
}

// alpha, as DSpark's loss weights (train_config.cpp): [0, 1000] keeps alpha x a selector CE finite in fp32 and bf16.
const util::NumberRange kSelectorLossWeightRange = util::closed(0, 1e3);

// The registered family whose config extras these settings are (its setting_keys() take conv_kernel_size), asked
// rather than named: its name, display name and draft-vocabulary refusal are its own.
const drafter::Family& settings_family() {
  for (const drafter::Family* f : drafter::registered_families())
    for (const std::string& key : f->setting_keys().in_dflash_config)
      if (key == "conv_kernel_size") return *f;
  throw std::logic_error("no registered drafter family takes conv_kernel_size (register_builtin_families())");
}

}  // namespace

void validate_dflash2_settings(const TrainConfig& c) {
  // Bounded as DSpark's loss weights are: 1e300 trained, overflowed the loss at step 1 and was blamed on RoPE.
  if (const auto e = util::out_of_range(c.selector_loss_weight, kSelectorLossWeightRange))
    throw std::invalid_argument("train config: 'selector_loss_weight' must be " + *e + ", got " +
                                shown(c.selector_loss_weight));
  try {
    c.dflash2_settings().validate("train config", "", 0, 0);  // hidden and vocab sizes: checked with the drafter
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();  // "train config: field 'x': expected ..." -> the train config's own wording
    const std::string from = "field '";
    if (const auto p = m.find(from); p != std::string::npos) m.replace(p, from.size(), "'");
    throw std::invalid_argument(m);
  }
  const drafter::Family& owner = settings_family();
  if (&drafter::family_of(c.family()) == &owner) {
    if (c.draft_vocab != 0)  // the selector's codebooks and candidates index the target's vocabulary
      throw std::invalid_argument(std::string("train config: 'draft_vocab' must be 0 with drafter_family ") +
                                  owner.name() + " (" + owner.draft_vocab_refusal() + "), got " +
                                  std::to_string(c.draft_vocab));
    return;
  }
  const TrainConfig d;
  auto must_be_default = [&](const char* key, bool is_default, const std::string& got) {
    if (!is_default)
      throw std::invalid_argument(std::string("train config: '") + key + "' must be its default with drafter_family " +
                                  c.family().name() +
                                  " (a " + owner.display_name() + " setting: set drafter_family " + owner.name() +
                                  "), got " + got);
  };
  must_be_default("conv_kernel_size", c.conv_kernel_size == d.conv_kernel_size, std::to_string(c.conv_kernel_size));
  must_be_default("conv_group_size", c.conv_group_size == d.conv_group_size, std::to_string(c.conv_group_size));
  must_be_default("selector_rank", c.selector_rank == d.selector_rank, std::to_string(c.selector_rank));
  must_be_default("selector_top_k", c.selector_top_k == d.selector_top_k, std::to_string(c.selector_top_k));
  must_be_default("selector_candidates", c.selector_candidates == d.selector_candidates,
                  std::string("'") + drafter::selector_candidates_name(c.selector_candidates) + "'");
  must_be_default("selector_stop_gradient", c.selector_stop_gradient == d.selector_stop_gradient, "true");
  must_be_default("selector_loss_weight", c.selector_loss_weight == d.selector_loss_weight,
                  shown(c.selector_loss_weight));
}

}  // namespace dflash::train
