// Rotary position embedding: the frequencies of a RopeConfig (default and the scaled types, computed with the
// same tensor operations as transformers' rotary embeddings, so float32 tables are transformers' bit for bit),
// cos/sin tables and the rotation. One implementation for the target and the drafter.
#pragma once
#include <ATen/core/Tensor.h>

#include "rope_config.h"

namespace dflash::models {

struct RopeFrequencies {
  at::Tensor inv_freq;            // [dim / 2], CPU
  double attention_scaling = 1.0;  // multiplies cos and sin (yarn's attention factor; 1 otherwise)
};

// transformers' ROPE_INIT_FUNCTIONS[rope.type] (modeling_rope_utils.py) for `dim` rotated dims per head, evaluated in
// `dtype` (float32 is transformers' own arithmetic; the drafter uses float64). `max_positions`: the model config's
// max_position_embeddings (0: unknown). `seq_len`: the largest position + 1 of the forward; only "dynamic" reads
// it: up to max_positions it is the default RoPE, beyond, the NTK base grows with seq_len (transformers' rule for
// one forward; transformers also keeps the longest length seen across calls, which we do not: our frequencies
// depend on the forward's own positions only). Throws RopeConfigError for values check_rope_config refuses.
RopeFrequencies rope_frequencies(const RopeConfig& rope, int64_t dim, int64_t max_positions, int64_t seq_len = 0,
                                 at::ScalarType dtype = at::kFloat);

// Whether a forward whose largest position is `last` needs frequencies other than those for seq_len 0.
inline bool rope_depends_on_length(const RopeConfig& rope, int64_t max_positions, int64_t last) {
  return rope.type == "dynamic" && last + 1 > max_positions;
}

// cos and sin tables [T, dim] (float32, CPU) for positions [start, start + T), times the attention scaling.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const RopeFrequencies& f, int64_t start, int64_t T);

// cos and sin tables [N, dim] (float32, CPU) for arbitrary positions [N] (int64, CPU); row n equals
// rope_cos_sin's row for the same position (batched decode: one position per sequence).
std::pair<at::Tensor, at::Tensor> rope_cos_sin_at(const RopeFrequencies& f, const at::Tensor& positions);

// x [batch, heads, T, head_dim] rotated by cos/sin [T, rot] (already on x's device and dtype); rot < head_dim
// rotates only the first rot dims of each head (partial RoPE).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace dflash::models
