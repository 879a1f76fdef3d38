// DSpark's training hooks (family_training.h): DeepSpec's objective weights and decay, its next-token blocks, the
// target's last hidden state as the L1 teacher, and DeepSpec's train metrics (docs/DSPARK.md).
#pragma once
#include "family_training.h"

namespace dflash::families {

const drafter::FamilyTraining& dspark_training();

}  // namespace dflash::families
