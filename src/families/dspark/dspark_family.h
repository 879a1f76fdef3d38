// DSpark (docs/DSPARK.md, DeepSpec's contract): DFlash + a low-rank Markov logit bias and a confidence head, whose
// settings (DSparkHeads) sit flat at config.json's top level as DeepSpec writes them.
#pragma once
#include "family.h"

namespace dflash::families {

const drafter::Family& dspark_family();

}  // namespace dflash::families
