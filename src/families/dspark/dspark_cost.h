// DSpark's cost of a training step (family_cost.h): its heads, its objective's L1 teacher and, on the CPU, its fused
// objective kernel (dspark_lm_loss_op.cpp), as the planner counts them (docs/DSPARK.md).
#pragma once
#include "family_cost.h"

namespace dflash::families {

const drafter::FamilyCost& dspark_cost();

}  // namespace dflash::families
