#include "gated_deltanet.h"

#include <ATen/ATen.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dflash::models::gdn {
namespace {

std::string shape(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

void check_inputs(const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                  const at::Tensor& state, const char* who) {
  const bool ok = k.dim() == 4 && v.dim() == 4 && g.dim() == 3 && beta.dim() == 3 && state.dim() == 4 &&
                  v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2) &&
                  g.sizes() == k.sizes().slice(0, 3) && beta.sizes() == g.sizes() && state.size(0) == k.size(0) &&
                  state.size(1) == k.size(2) && state.size(2) == k.size(3) && state.size(3) == v.size(3);
  if (!ok)
    throw std::invalid_argument(std::string(who) + ": expected k [B, T, H, Dk], v [B, T, H, Dv], g and beta [B, T, H], "
                                "state [B, H, Dk, Dv]; got k " + shape(k) + ", v " + shape(v) + ", g " + shape(g) +
                                ", beta " + shape(beta) + ", state " + shape(state));
}

}  // namespace

at::ScalarType state_dtype(at::ScalarType input) { return input == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor l2_normalize(const at::Tensor& x) { return x * at::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + 1e-6); }

at::Tensor repeat_heads(const at::Tensor& x, int64_t n) {
  if (n == 1) return x;
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  return x.unsqueeze(3).expand({B, T, H, n, D}).reshape({B, T, H * n, D});
}

std::pair<at::Tensor, at::Tensor> causal_conv(const at::Tensor& x, const at::Tensor& state, const at::Tensor& w) {
  const int64_t C = x.size(1), T = x.size(2), K = w.size(1);
  at::Tensor full = at::cat({state.to(x.scalar_type()), x}, -1);  // [B, C, K - 1 + T]
  at::Tensor y = at::conv1d(full, w.unsqueeze(1), std::optional<at::Tensor>(), at::IntArrayRef{1}, at::IntArrayRef{0},
                            at::IntArrayRef{1}, /*groups=*/C);
  return {at::silu(y), full.narrow(-1, T, K - 1).contiguous()};
}

at::Tensor conv_state_after(const at::Tensor& state, const at::Tensor& x) {
  const int64_t keep = state.size(-1);
  at::Tensor full = at::cat({state, x.to(state.scalar_type())}, -1);
  return full.narrow(-1, full.size(-1) - keep, keep).contiguous();
}

std::pair<at::Tensor, at::Tensor> recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& g, const at::Tensor& beta, const at::Tensor& state) {
  check_inputs(k, v, g, beta, state, "gated delta rule (recurrent)");
  const int64_t T = k.size(1);
  at::Tensor S = state;
  std::vector<at::Tensor> outs;
  if (q.defined()) outs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const at::Tensor kt = k.select(1, t).unsqueeze(-2);              // [B, H, 1, Dk]
    S = S * g.select(1, t).exp().unsqueeze(-1).unsqueeze(-1);         // decay
    const at::Tensor read = at::matmul(kt, S);                        // [B, H, 1, Dv]: what S predicts for k
    const at::Tensor u = (v.select(1, t).unsqueeze(-2) - read) * beta.select(1, t).unsqueeze(-1).unsqueeze(-1);
    S = S + at::matmul(kt.transpose(-1, -2), u);                      // rank-1 write k u^T
    if (q.defined()) outs.push_back(at::matmul(q.select(1, t).unsqueeze(-2), S).squeeze(-2));  // [B, H, Dv]
  }
  at::Tensor o = q.defined() ? (T > 0 ? at::stack(outs, 1) : at::empty({k.size(0), 0, k.size(2), v.size(3)}, v.options()))
                             : at::Tensor();
  return {o, S};
}

// Within a chunk (positions t, s in [0, C), G = cumulative sum of g, so a_s..a_t = exp(G_t - G_s)):
//   u_t + beta_t sum_{s<t} exp(G_t - G_s) (k_t . k_s) u_s = beta_t v_t - beta_t exp(G_t) k_t^T S0
// i.e. (I + A) U = beta V - (beta exp(G) K) S0 with A strictly lower triangular. Writing W = (I+A)^-1 beta V and
// P = (I+A)^-1 (beta exp(G) K), U = W - P S0, and
//   o_t = exp(G_t) q_t^T S0 + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s,
//   S_C = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T.
// W, P and the masked decays of every chunk are computed at once; only the S0-dependent part is sequential.
std::pair<at::Tensor, at::Tensor> chunked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& g, const at::Tensor& beta, const at::Tensor& state,
                                          int64_t chunk) {
  check_inputs(k, v, g, beta, state, "gated delta rule (chunked)");
  if (chunk < 1) throw std::invalid_argument("gated delta rule: chunk size must be positive");
  const int64_t B = k.size(0), T = k.size(1), H = k.size(2), Dk = k.size(3), Dv = v.size(3);
  if (T == 0) return {at::empty({B, 0, H, Dv}, v.options()), state};
  const int64_t C = std::min(chunk, T);            // a short block (verification) is one chunk of its own size
  const int64_t pad = (C - T % C) % C, N = (T + pad) / C;
  // [B, T, H, D] -> [B, H, N, C, D]; padded tokens have k = v = q = 0, beta = 0 and g = 0 (no decay): they
  // write nothing and leave the state as it is.
  auto blocks = [&](const at::Tensor& x) {
    at::Tensor t = x.transpose(1, 2);
    if (pad) t = at::constant_pad_nd(t, {0, 0, 0, pad});
    return t.reshape({B, H, N, C, x.size(3)});
  };
  auto blocks3 = [&](const at::Tensor& x) {
    at::Tensor t = x.transpose(1, 2);
    if (pad) t = at::constant_pad_nd(t, {0, pad});
    return t.reshape({B, H, N, C});
  };
  const at::Tensor qc = blocks(q), kc = blocks(k), vc = blocks(v), bc = blocks3(beta);
  const at::Tensor G = blocks3(g).cumsum(-1);                                   // [B, H, N, C]
  const auto bool_opts = at::TensorOptions().dtype(at::kBool).device(k.device());
  const at::Tensor causal = at::ones({C, C}, bool_opts).tril();                // s <= t
  // exp(G_t - G_s) for s <= t, 0 above the diagonal (masked before exp: G_t - G_s > 0 there can overflow).
  const at::Tensor decay =
      (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity()).exp();
  const at::Tensor kkT = at::matmul(kc, kc.transpose(-1, -2));                // [B, H, N, C, C]
  const at::Tensor A = (kkT * decay * bc.unsqueeze(-1)).tril(-1);
  const at::Tensor eG = G.exp();
  const at::Tensor rhs = at::cat({vc * bc.unsqueeze(-1), kc * (bc * eG).unsqueeze(-1)}, -1);  // [.., C, Dv + Dk]
  // (I + A) X = rhs by forward substitution; the unit diagonal is implied (A's diagonal is not read).
  const at::Tensor X = at::linalg_solve_triangular(A, rhs, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  const at::Tensor W = X.narrow(-1, 0, Dv), P = X.narrow(-1, Dv, Dk);
  const at::Tensor QK = at::matmul(qc, kc.transpose(-1, -2)) * decay;          // includes s == t
  const at::Tensor q_read = qc * eG.unsqueeze(-1);                              // reads S0 decayed to t
  const at::Tensor G_last = G.narrow(-1, C - 1, 1);                             // [B, H, N, 1]
  const at::Tensor k_write = kc * (G_last - G).exp().unsqueeze(-1);             // decayed to the chunk end
  const at::Tensor chunk_decay = G_last.exp().unsqueeze(-1);                    // [B, H, N, 1, 1]
  at::Tensor S = state;
  std::vector<at::Tensor> outs;
  outs.reserve(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const at::Tensor U = W.select(2, n) - at::matmul(P.select(2, n), S);        // [B, H, C, Dv]
    outs.push_back(at::matmul(q_read.select(2, n), S) + at::matmul(QK.select(2, n), U));
    S = S * chunk_decay.select(2, n) + at::matmul(k_write.select(2, n).transpose(-1, -2), U);
  }
  at::Tensor o = at::stack(outs, 2).reshape({B, H, N * C, Dv});
  if (pad) o = o.narrow(2, 0, T);
  return {o.transpose(1, 2).contiguous(), S};
}

}  // namespace dflash::models::gdn
