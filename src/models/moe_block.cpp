#include "moe_block.h"

#include <ATen/ATen.h>

#include <vector>

#include "moe_grouped.h"

namespace dflash::models {

namespace {

// gate_up [n, 2 I] (gate columns, then up) -> the expert's activation [n, I].
at::Tensor expert_activation(const at::Tensor& gu, const MoeConfig& c, int64_t I) {
  const at::Tensor gate = gu.narrow(1, 0, I), up = gu.narrow(1, I, I);
  if (c.experts == MoeExperts::swiglu) return at::silu(gate) * up;
  // gpt-oss's clamped SwiGLU, in transformers' order of operations
  const at::Tensor g = gate.clamp_max(c.swiglu_limit);
  const at::Tensor u = up.clamp(-c.swiglu_limit, c.swiglu_limit);
  return (u + 1) * (g * at::sigmoid(g * c.swiglu_alpha));
}

at::Tensor plus_bias(at::Tensor y, const at::Tensor& bias, int64_t e) {
  return bias.defined() ? y + bias[e] : y;
}

}  // namespace

MoeRouting moe_route(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x) {
  if (c.router == MoeRouter::topk_softmax) {
    const at::Tensor logits = at::linear(x, w.router, w.router_bias);  // F.linear, as transformers
    auto [top, ids] = at::topk(logits, c.top_k, -1);
    return {ids, at::softmax(top, -1)};
  }
  at::Tensor logits = at::matmul(x, w.router.t());
  at::Tensor probs = at::softmax(logits, -1, at::kFloat);
  auto [top, ids] = at::topk(probs, c.top_k, -1);
  if (c.norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  return {ids, top.to(logits.scalar_type())};
}

at::Tensor moe_forward(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x_in, MoeGemm gemm) {
  const int64_t H = x_in.size(-1);
  const at::Tensor x = x_in.reshape({-1, H});
  const MoeRouting r = moe_route(w, c, x);
  const int64_t E = c.num_experts;
  // The N k assignments sorted by expert (stable: within an expert, token order), each expert's share counted.
  const MoeDispatch d = moe_dispatch(r, E);
  // The grouped GEMM has no bias and runs the plain SwiGLU: gpt-oss's experts always take the loop.
  const bool plain_experts = c.experts == MoeExperts::swiglu && !w.gate_up_bias.defined() && !w.down_bias.defined();
  TORCH_CHECK(gemm != MoeGemm::grouped || plain_experts,
              "moe_forward: the grouped expert GEMM runs unbiased SwiGLU experts only (gpt-oss's take the loop)");
  const bool grouped = x.size(0) > 0 && (gemm == MoeGemm::grouped ||
                                          (gemm == MoeGemm::automatic && plain_experts && moe_grouped_gemm_usable(w, x)));
  at::Tensor out;
  if (grouped) {
    out = moe_experts_grouped(w, x, d);
  } else {
    out = at::zeros_like(x);
    const at::Tensor counts = d.counts.to(at::kCPU);  // the only values that come back to the host
    const int64_t* n = counts.data_ptr<int64_t>();
    const int64_t I = w.down.size(2);
    int64_t start = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (n[e] == 0) continue;
      const at::Tensor rows = d.tokens.narrow(0, start, n[e]);
      const at::Tensor h = x.index_select(0, rows);
      const at::Tensor gu = plus_bias(at::matmul(h, w.gate_up[e].t()), w.gate_up_bias, e);
      const at::Tensor act = expert_activation(gu, c, I);
      const at::Tensor y =
          plus_bias(at::matmul(act, w.down[e].t()), w.down_bias, e) * d.weights.narrow(0, start, n[e]);
      out.index_add_(0, rows, y);
      start += n[e];
    }
  }
  if (w.shared_gate.defined()) {
    const at::Tensor s =
        at::matmul(at::silu(at::matmul(x, w.shared_gate_proj.t())) * at::matmul(x, w.shared_up.t()), w.shared_down.t());
    out = out + at::sigmoid(at::matmul(x, w.shared_gate.t())) * s;
  }
  return out.view(x_in.sizes());
}

}  // namespace dflash::models
