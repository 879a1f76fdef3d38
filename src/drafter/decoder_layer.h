// One DFlash decoder layer (Qwen3 layer with KV injection): queries from the block tokens only; keys and
// values from [context features ; block tokens] through the same k_proj/v_proj/k_norm; RoPE at absolute
// positions; attention through the anchor-block op, fused or reference (GQA never expanded).
#pragma once
#include <ATen/core/Tensor.h>

#include "attention_backend.h"
#include "drafter_weights.h"

namespace dflash::drafter {

struct DecoderLayerShape {
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0, block_size = 0, window = 0;
  double eps = 1e-6;
  ops::AttentionBackend attention = ops::AttentionBackend::Fused;  // Fused or Reference (chosen per device)
};

// Per-forward tensors every layer shares (never trained).
struct LayerShared {
  at::Tensor context;           // [b, C, H] hidden_norm(fc(target features)); may require grad
  at::Tensor q_cos, q_sin;      // [b, T, 1, D] block positions anchor+k
  at::Tensor k_cos, k_sin;      // [b, C+T, 1, D] context positions 0..C-1 then the block positions
  at::Tensor anchors, keep;     // [b, N]
  at::Tensor ctx_start;         // [b, N] packed rows: each block's document start; undefined otherwise
};

// The two sublayers on their normed inputs h [b, T, H] (without the residual), so DFlash2 can wrap each in its
// convolutions (dflash2_layer.h): attention (queries and the block's keys/values from h, context keys/values from
// sh.context, then o_proj) and the SwiGLU MLP.
at::Tensor attention_sublayer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& h,
                              const LayerShared& sh);
at::Tensor mlp_sublayer(const LayerWeights& w, const at::Tensor& h);

// x [b, T, H] (T = N*B block tokens) -> [b, T, H]: x + attention(norm(x)), then the same with the MLP.
at::Tensor decoder_layer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& x, const LayerShared& sh);

// Same result; runs the layer without autograd in forward, keeps only x, and recomputes the layer with
// autograd in backward (activation checkpointing).
at::Tensor checkpointed_decoder_layer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& x,
                                      const LayerShared& sh);

}  // namespace dflash::drafter
