// DSpark's objective benchmark (drafter/family_objective_bench.h; `dflash bench step --objective-naive 1` with
// drafter_family dspark): its chunked objective (dflash::dspark_lm_loss, one chunk of rows x V logits at a time; the
// fused CPU kernel, and again with its generic ATen passes) against the naive version that materialises the batch's
// [rows, V] logits, written here from the formulas (docs/DSPARK.md), on the same inputs: time and peak memory of
// forward + backward, and the difference of their losses and gradients.
#pragma once
#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include "family_objective_bench.h"

namespace dflash::families {

// Returns {"rows", "vocab", "chunk_rows", "chunked": {mean_seconds, measured_peak_bytes, loss}, "generic": {...},
// "naive": {...}, "loss_abs_diff", "grad_max_abs_diff" (chunked vs naive), "generic_loss_abs_diff",
// "generic_grad_max_abs_diff" (chunked vs generic)}. DSparkModel::benchmark_objective.
nlohmann::json compare_dspark_objective(const drafter::ObjectiveBenchSetup& o);

// The naive objective: L = (ce_w sum w CE + l1_w sum w L1 + conf_w sum w BCE(c, stop-grad clamp(1 - L1/2, 0, 1)))
// / (sum w + den_eps) over full logits l = hidden lm_head^T + markov W2^T and z = teacher[teacher_index] lm_head^T.
at::Tensor naive_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                             const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& markov_w2,
                             const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                             const at::Tensor& confidence, double ce_w, double l1_w, double conf_w, double den_eps);

}  // namespace dflash::families
