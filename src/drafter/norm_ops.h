// Memory-lean autograd pieces of the decoder layer. Each saves exactly what its backward needs, so the
// memory planner can count saved activations tensor by tensor (see memory_planner.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include "drafter_config.h"
#include "rope.h"

namespace dflash::drafter {

// RMSNorm over the last dim, Qwen3 style: y = (x.float() * rstd).to(x.dtype) * w.
// Saves x and rstd (float32 per row; float64 for fp64 inputs).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// down_proj(silu(g) * u): saves g, u (and the weight); silu(g)*u is recomputed in backward.
at::Tensor swiglu_down(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down_weight);

// The drafter's RoPE for one forward: models::rope_frequencies of c.rope in float64; "dynamic" takes the largest
// of `positions` (every position of the forward, queries and keys alike: both sides use the same frequencies).
models::RopeFrequencies drafter_rope(const DrafterConfig& c, const at::Tensor& positions);
// Rotary tables for integer positions [batch, L]: cos, sin of shape [batch, L, 1, head_dim] in `dtype`, HF layout,
// angles in float64, times the attention scaling (yarn).
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, const models::RopeFrequencies& f,
                                              at::ScalarType dtype);
// x [batch, L, heads, D] -> x * cos + rotate_half(x) * sin. Saves only cos/sin (shared across layers).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace dflash::drafter
