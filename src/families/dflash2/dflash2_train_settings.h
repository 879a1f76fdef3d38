// DFlash2's `dflash train` settings (drafter/family_train_settings.h): its model's (conv_kernel_size,
// conv_group_size, selector_rank, selector_top_k; with a DFlash2 drafter_config, its values) and its objective's
// (selector_candidates, selector_stop_gradient, selector_loss_weight), declared here so that train's settings table
// adds them. Torch-free.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "dflash2_settings.h"
#include "family_train_settings.h"

namespace dflash::families {

// Ranges ("train config: 'selector_rank': expected an integer in [1, 65536], got 0"), and with a DFlash2 run, no
// draft vocabulary.
const drafter::FamilyTrainSettings& dflash2_train_settings();

// The values typed, read from the run's settings (train_config.json's keys), which train has checked the kinds of.
struct DFlash2TrainValues {
  drafter::DFlash2Settings model;
  drafter::SelectorCandidates selector_candidates = drafter::kDefaultSelectorCandidates;
  bool selector_stop_gradient = false;
  double selector_loss_weight = drafter::kDefaultSelectorLossWeight;  // alpha
};
DFlash2TrainValues dflash2_train_values(const nlohmann::json& settings);

}  // namespace dflash::families
