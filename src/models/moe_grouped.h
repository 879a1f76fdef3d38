// The routed experts' GEMMs as two grouped GEMMs (LibTorch's at::_grouped_mm) instead of a GEMM pair per expert:
// the layout both paths share (assignments sorted by expert, each expert's rows contiguous, the int32 running
// ends of its counts) and the grouped run itself. On CUDA in bfloat16 LibTorch 2.11 runs a fused CUTLASS kernel
// on sm90/sm100 that reads the offsets on the device (no host sync per layer); elsewhere its own per-group loop.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "moe_block.h"

namespace dflash::models {

// The N x k assignments of a routing, sorted by expert (stable: within an expert, token order).
struct MoeDispatch {
  at::Tensor tokens;   // [N k] int64: the token row of each sorted slot
  at::Tensor weights;  // [N k, 1]: its routing weight (the routing's dtype)
  at::Tensor counts;   // [E] int64: slots per expert
  at::Tensor offsets;  // [E] int32: the running sum of counts (expert e's rows end at offsets[e]), at::_grouped_mm's offs
};
MoeDispatch moe_dispatch(const MoeRouting& r, int64_t num_experts);

// Whether the grouped GEMMs apply to x [N, H] with these weights: x on CUDA in bfloat16 (the dtype of the fused
// kernel; other dtypes would only reach LibTorch's per-group loop), weights alike, N > 0, and H and the expert
// width multiples of 8 (the kernel's 16-byte stride alignment, checked by LibTorch).
bool moe_grouped_gemm_usable(const MoeWeights& w, const at::Tensor& x);

// The experts' weighted outputs summed per token [N, H] (no shared expert): gather the sorted slots' rows, one
// grouped GEMM with gate_up, SiLU-gate, one with down, scale by the routing weights, index_add into zeros.
// Runs wherever at::_grouped_mm runs (also on CPU, through LibTorch's loop: the tests compare it to ours there).
at::Tensor moe_experts_grouped(const MoeWeights& w, const at::Tensor& x, const MoeDispatch& d);

}  // namespace dflash::models
