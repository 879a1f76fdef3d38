#include "moe_block.h"

#include <ATen/ATen.h>

#include <vector>

#include "moe_grouped.h"

namespace dflash::models {

MoeRouting moe_route(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x) {
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
  const bool grouped = x.size(0) > 0 && (gemm == MoeGemm::grouped ||
                                          (gemm == MoeGemm::automatic && moe_grouped_gemm_usable(w, x)));
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
      const at::Tensor gu = at::matmul(h, w.gate_up[e].t());
      const at::Tensor act = at::silu(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
      const at::Tensor y = at::matmul(act, w.down[e].t()) * d.weights.narrow(0, start, n[e]);
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
