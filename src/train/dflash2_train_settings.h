// DFlash2's train settings (train_config.h: conv_kernel_size ... selector_loss_weight) against the family and the
// drafter config: the hooks train_config, drafter_family_setting and target_setup call. Torch-free.
#pragma once
#include <string>

#include "drafter_config.h"
#include "train_config.h"

namespace dflash::train {

// Ranges ("train config: 'selector_rank': expected an integer in [1, 65536], got 0"), and, unless the family is
// dflash2, that each DFlash2 setting is at its default (one given to another family would be dropped unsaid).
void validate_dflash2_settings(const TrainConfig& c);

// A DFlash2 drafter_config's conv_* / selector_rank / selector_top_k are the run's: a setting left at its default
// takes the file's, one given that differs is an error naming the file, the field and both values.
void take_dflash2_settings_from(TrainConfig& c, const drafter::DrafterConfig& file, const std::string& command);

// The drafter config built from the target (no drafter_config) gets the run's family and DFlash2 settings; a
// selector_rank not given is default_head_rank(hidden_size) (head_rank_default.h).
void apply_dflash2_settings(const TrainConfig& c, drafter::DrafterConfig& d);

}  // namespace dflash::train
