// y = x·Wᵀ + b for the handful of rows speculative decoding multiplies (a one-token decode step, an 8-token
// verify block, the drafter's slots), computed as (W·xᵀ)ᵀ on CPU.
// Why: MKL's x·Wᵀ for 2-8 rows runs far below its large-batch speed on the machine this was measured on (2-core
// AMD EPYC, torch 2.11 wheel): SmolLM2's 49152x576 LM head took 12-24 ms for 2-7 rows as x·Wᵀ and 3-9 ms as
// W·xᵀ, and one row goes through a single-threaded sgemv (7.5 ms) while two rows as W·xᵀ take 3 ms, so one row
// is duplicated. docs/BENCHMARKS.md ("Speculative cycle on CPU") has the measurements. Results equal at::linear
// up to float rounding (different summation order); CUDA tensors, other dtypes and more rows use at::linear.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace dflash::models {

inline constexpr int64_t kFewRowsMax = 8;  // at most this many rows take the W·xᵀ path

// x [..., in], w [out, in], b [out] or undefined -> [..., out].
at::Tensor few_rows_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

}  // namespace dflash::models
