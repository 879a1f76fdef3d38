// The gated delta rule of Gated DeltaNet (Qwen3.5 / Qwen3.6 linear-attention layers) and its short causal
// convolution, in plain ATen ops (any device, no JIT). Per value head the state S is a [Dk, Dv] matrix; per
// token t, with decay a_t = exp(g_t) and write strength beta_t:
//   S <- a_t S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = S^T q_t
// (q_t, k_t L2-normalised, q_t also scaled by 1/sqrt(Dk)). Two forms compute it:
// - recurrent: token by token, O(T) time and O(1) extra memory (one-token decode, state rollback);
// - chunked: chunks of C tokens solved in closed form (a unit lower-triangular C x C system per chunk), then
//   a scan over chunks; O(T C) time and memory, i.e. linear in T for a fixed C (prefill, block verification).
// Both take and return the state, so a sequence can switch between them at any token.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace dflash::models::gdn {

inline constexpr int64_t kChunk = 64;  // tokens per chunk, as the reference implementation

// The dtype the rule runs in: float32 for 16/32-bit inputs (what transformers does), float64 for float64.
at::ScalarType state_dtype(at::ScalarType input);

// x / sqrt(sum(x^2) + 1e-6) over the last dim (the normalisation transformers and fla apply to q and k).
at::Tensor l2_normalize(const at::Tensor& x);

// [B, T, H, D] -> [B, T, H * n, D]: each head serves n consecutive heads (q/k heads shared by value heads).
at::Tensor repeat_heads(const at::Tensor& x, int64_t n);

// Depthwise causal conv1d with a carried state, then SiLU. x [B, C, T], state [B, C, K - 1] (the K - 1 inputs
// before x; zeros at the start of a sequence), w [C, K]. Returns (silu(conv(x)) [B, C, T], new state: the last
// K - 1 inputs of [state | x]).
std::pair<at::Tensor, at::Tensor> causal_conv(const at::Tensor& x, const at::Tensor& state, const at::Tensor& w);
// Only the new state (rollback: the conv inputs of the kept tokens are known, their outputs are not needed).
at::Tensor conv_state_after(const at::Tensor& state, const at::Tensor& x);

// q, k [B, T, H, Dk] (normalised, q scaled), v [B, T, H, Dv], g, beta [B, T, H], state [B, H, Dk, Dv], all in
// one floating dtype on one device. Returns (o [B, T, H, Dv], final state).
std::pair<at::Tensor, at::Tensor> chunked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& g, const at::Tensor& beta, const at::Tensor& state,
                                          int64_t chunk = kChunk);
// Same result, token by token. q may be undefined: then only the state is computed (o is undefined).
std::pair<at::Tensor, at::Tensor> recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& g, const at::Tensor& beta, const at::Tensor& state);

}  // namespace dflash::models::gdn
