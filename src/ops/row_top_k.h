// Each row's top K of a logits chunk in one scan, ties to the lower column, and DFlash2's unary transform of
// raw LM-head logits. The chunked loss uses both to hand DFlash2's selector its candidates from the logits the
// unary cross-entropy computes anyway (docs/DFLASH2.md), so the selector needs no second LM-head pass.
#pragma once
#include <cstdint>
#include <utility>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

// U = softcap(output_multiplier * raw) in raw's dtype (final_logit_softcapping <= 0: no cap).
at::Tensor unary_logits(const at::Tensor& raw, double output_multiplier, double final_logit_softcapping);

// rows [r, V] (float, double or bfloat16; any row stride) -> (values [r, k] in rows' dtype, columns [r, k] int64),
// by descending value, equal values by ascending column: the order of a stable descending sort. NaN counts as
// -inf. On the CPU one scan per row; on another device row_top_k_by_threshold. Throws std::invalid_argument for
// another dtype, or k outside [1, min(V, 1024)].
std::pair<at::Tensor, at::Tensor> row_top_k(const at::Tensor& rows, int64_t k);

// The same result from ATen ops on any device (CUDA's path; tested against the scan on the CPU): the k-th largest
// value of each row (at::topk's values do not depend on how it orders ties), every column above it and the
// lowest-numbered columns equal to it, then a stable descending sort of those k. Rows go 64 at a time, so its
// temporaries stay at 64 x V x (value + int32 count + 2 masks).
std::pair<at::Tensor, at::Tensor> row_top_k_by_threshold(const at::Tensor& rows, int64_t k);

}  // namespace dflash::ops
