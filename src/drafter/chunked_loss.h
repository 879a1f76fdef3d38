// The drafter's chunked LM-head loss is the LibTorch op dflash::chunked_lm_loss (src/ops/chunked_lm_loss_op.h);
// these names keep the drafter layer's callers unchanged.
#pragma once
#include "chunked_lm_loss_op.h"

namespace dflash::drafter {

using ops::chunked_lm_loss;
using ops::ChunkedLossOptions;

}  // namespace dflash::drafter
