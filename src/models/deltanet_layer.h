// The token mixer of a Qwen3.5 / Qwen3.6 linear-attention layer (transformers' Qwen3_5GatedDeltaNet):
// in_proj_qkv -> short causal depthwise conv + SiLU -> q, k, v; in_proj_b -> beta = sigmoid; in_proj_a ->
// decay g = -exp(A_log) * softplus(a + dt_bias); the gated delta rule (gated_deltanet.h) over L2-normalised q, k;
// a per-head RMSNorm of the result gated by silu(in_proj_z); out_proj.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "linear_state.h"
#include "target_config.h"

namespace dflash::models {

struct DeltaNetWeights {
  at::Tensor in_qkv, in_z, in_b, in_a, out;  // [conv_dim, H], [Vd, H], [Hv, H], [Hv, H], [H, Vd]
  at::Tensor conv;                            // [conv_dim, K]
  at::Tensor neg_A;                           // -exp(A_log) [Hv], in the state dtype
  at::Tensor dt_bias;                         // [Hv], in the state dtype
  at::Tensor norm;                            // [Dv] gated RMSNorm weight (not zero-centred)
};

struct DeltaNetOutput {
  at::Tensor out;       // [B, T, H] in the input's dtype
  at::Tensor conv, rec; // states after the T tokens
  LinearRecord record;  // what a rollback inside these tokens replays
};

// h [B, T, H] (after input_layernorm); conv0 [B, conv_dim, K - 1] and rec0 [B, Hv, Dk, Dv] the states before
// the first token (zeros for a new sequence). A single token takes the recurrent form, longer inputs the
// chunked one. eps: rms_norm_eps.
DeltaNetOutput deltanet_forward(const DeltaNetWeights& w, const LinearAttentionConfig& cfg, double eps,
                                const at::Tensor& h, const at::Tensor& conv0, const at::Tensor& rec0);

}  // namespace dflash::models
