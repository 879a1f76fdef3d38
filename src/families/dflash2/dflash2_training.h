// DFlash2's training hooks (family_training.h): the selector's CE in the objective and what a DFlash2 run reports
// each log step (docs/DFLASH2.md "The objective"): the selector loss, unary recall@K, the teacher-forced selector
// accuracy, and the accepted lengths of the path the selector walks fed with its own picks, of the unary top-K oracle
// (not the unary argmax: TorchSpec #177) and of the unary argmax.
#pragma once
#include "family_training.h"

namespace dflash::families {

const drafter::FamilyTraining& dflash2_training();

}  // namespace dflash::families
