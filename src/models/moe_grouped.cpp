#include "moe_grouped.h"

#include <ATen/ATen.h>
#include <ATen/ops/_grouped_mm.h>

namespace dflash::models {

MoeDispatch moe_dispatch(const MoeRouting& r, int64_t num_experts) {
  const int64_t k = r.experts.size(-1);
  const at::Tensor flat = r.experts.reshape({-1});
  const at::Tensor order = std::get<1>(at::sort(flat, /*stable=*/true, 0, /*descending=*/false));
  MoeDispatch d;
  d.tokens = at::div(order, k, "floor");
  d.weights = r.weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  d.counts = at::bincount(flat, {}, num_experts);
  d.offsets = d.counts.cumsum(0, at::kInt);
  return d;
}

bool moe_grouped_gemm_usable(const MoeWeights& w, const at::Tensor& x) {
  const auto bf16 = at::kBFloat16;
  return x.is_cuda() && x.scalar_type() == bf16 && w.gate_up.scalar_type() == bf16 && w.down.scalar_type() == bf16 &&
         w.gate_up.device() == x.device() && x.size(0) > 0 && x.size(1) % 8 == 0 && w.down.size(2) % 8 == 0;
}

at::Tensor moe_experts_grouped(const MoeWeights& w, const at::Tensor& x, const MoeDispatch& d) {
  const int64_t I = w.down.size(2);
  const at::Tensor rows = x.index_select(0, d.tokens);  // [N k, H], expert by expert
  // at::_grouped_mm(a [M, K], b [G, K, N], offs) multiplies the rows of group g by b[g]: the weights transposed
  // as views (column-major per expert, the layout the kernel takes).
  const at::Tensor gu = at::_grouped_mm(rows, w.gate_up.transpose(1, 2), d.offsets);
  const at::Tensor act = at::silu(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
  const at::Tensor y = at::_grouped_mm(act, w.down.transpose(1, 2), d.offsets) * d.weights;
  return at::zeros_like(x).index_add_(0, d.tokens, y);
}

}  // namespace dflash::models
