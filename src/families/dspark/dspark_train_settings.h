// DSpark's `dflash train` settings (drafter/family_train_settings.h): its heads (markov_rank, markov_head_type,
// enable_confidence_head, confidence_head_with_markov; with a DSpark drafter_config, its values) and its objective's
// weights (DeepSpec's defaults), declared here so that train's settings table adds them. Torch-free.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "family_train_settings.h"
#include "markov_heads.h"

namespace dflash::families {

const drafter::FamilyTrainSettings& dspark_train_settings();

// The values typed, read from the run's settings (train_config.json's keys), which train has checked the kinds of.
struct DSparkTrainValues {
  drafter::DSparkHeads heads;
  double ce_loss_weight = drafter::kDSparkCeWeight, l1_loss_weight = drafter::kDSparkL1Weight,
         confidence_loss_weight = drafter::kDSparkConfidenceWeight;
};
DSparkTrainValues dspark_train_values(const nlohmann::json& settings);

}  // namespace dflash::families
