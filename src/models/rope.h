// Rotary position embedding tables (default and llama3-scaled frequencies), computed in float32 the
// same way Hugging Face does so hidden states match to rounding.
#pragma once
#include <ATen/core/Tensor.h>

#include "target_config.h"

namespace dflash::models {

// [head_dim / 2] inverse frequencies, float32, CPU.
at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

// cos and sin tables [T, head_dim] (float32, CPU) for positions [start, start + T).
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, int64_t start, int64_t T);

// cos and sin tables [N, head_dim] (float32, CPU) for arbitrary positions [N] (int64, CPU); row n equals
// rope_cos_sin's row for the same position (batched decode: one position per sequence).
std::pair<at::Tensor, at::Tensor> rope_cos_sin_at(const at::Tensor& inv_freq, const at::Tensor& positions);

// x [batch, heads, T, head_dim] rotated by cos/sin [T, rot] (already on x's device and dtype); rot < head_dim
// rotates only the first rot dims of each head (partial RoPE).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace dflash::models
