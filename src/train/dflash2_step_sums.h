// A DFlash2 step's selector statistics as one vector of sums (they add over micro-batches, workers and processes,
// so they ride along the step's all-reduce), and the metrics they give.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "dflash2_objective.h"
#include "dflash2_step_metrics.h"

namespace dflash::train {

inline constexpr int64_t kDFlash2Sums = 9;

// [kDFlash2Sums] float64 on the CPU: ce_sum, weight (sum w), rows, recall_hits, selector_hits, blocks,
// path_length_sum, oracle_length_sum, unary_length_sum.
at::Tensor dflash2_sums(const drafter::DFlash2Stats& s);
DFlash2StepMetrics dflash2_metrics_of(const at::Tensor& sums);

}  // namespace dflash::train
