// The routed mixture-of-experts MLP of Qwen3-MoE and Qwen3.5/3.6-MoE in plain ATen ops: a softmax router picks
// top-k experts per token; each expert's tokens are gathered, run through its SwiGLU as one GEMM pair and scattered
// back weighted (no dense pass over all experts); Qwen3.5-MoE adds a shared expert gated by a sigmoid. gpt-oss
// (MoeRouter::topk_softmax, MoeExperts::clamped_swiglu) routes by the top-k logits, adds biases and runs its clamped
// SwiGLU.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "target_config.h"

namespace dflash::models {

struct MoeWeights {
  at::Tensor router;   // [E, H]
  at::Tensor gate_up;  // [E, 2 I, H]: each expert's gate_proj rows, then its up_proj rows
  at::Tensor down;     // [E, H, I]
  // gpt-oss (undefined otherwise): the router's bias [E], each expert's gate_up bias [E, 2 I] (gate then up, as
  // gate_up's rows) and down bias [E, H].
  at::Tensor router_bias, gate_up_bias, down_bias;
  // Qwen3.5-MoE shared expert (undefined otherwise): a SwiGLU of shared_intermediate, scaled per token by
  // sigmoid(shared_gate . x).
  at::Tensor shared_gate_proj, shared_up, shared_down, shared_gate;  // [Is, H], [Is, H], [H, Is], [1, H]
};

// The routing of N tokens: for each, top_k expert ids (descending probability, ties as at::topk breaks them) and
// their weights in the tokens' dtype (softmax in float32 over all experts, then renormalised when norm_topk_prob;
// gpt-oss: the top_k logits, then a softmax over those in the logits' dtype).
struct MoeRouting {
  at::Tensor experts;  // [N, k] int64
  at::Tensor weights;  // [N, k]
};
MoeRouting moe_route(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x);

// How the experts' GEMMs run: `loop`, one GEMM pair per expert that got tokens (one host sync per layer for the
// counts); `grouped`, two at::_grouped_mm calls over all experts (moe_grouped.h); `automatic`, grouped where
// moe_grouped_gemm_usable (CUDA, bfloat16, aligned widths) and the experts are plain (no biases, not gpt-oss),
// else the loop.
enum class MoeGemm { automatic, loop, grouped };

// x [..., H] (already normalised) -> the block's output, same shape and dtype. In the loop experts run in
// increasing id order, each adding its weighted outputs into a zero tensor, as transformers' eager loop does.
at::Tensor moe_forward(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x, MoeGemm gemm = MoeGemm::automatic);

}  // namespace dflash::models
