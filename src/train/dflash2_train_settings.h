// DFlash2's train settings (train_config.h: conv_kernel_size ... selector_loss_weight) checked against the family
// (train_config's validate calls it; a drafter config's values meet them in drafter_spec.h). Torch-free.
#pragma once
#include <string>

#include "train_config.h"

namespace dflash::train {

// Ranges ("train config: 'selector_rank': expected an integer in [1, 65536], got 0"), and, unless the family is
// dflash2, that each DFlash2 setting is at its default (one given to another family would be dropped unsaid).
void validate_dflash2_settings(const TrainConfig& c);

}  // namespace dflash::train
