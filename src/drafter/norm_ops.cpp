#include "norm_ops.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace dflash::drafter {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType acc_of(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps) {
    const at::Tensor xf = x.to(acc_of(x));
    const at::Tensor rstd = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true).add_(eps));
    at::Tensor y = xf.mul(rstd).to(x.scalar_type()).mul_(w);
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor& x = s[0];
    const at::Tensor& w = s[1];
    const at::Tensor& rstd = s[2];
    const at::ScalarType acc = acc_of(x);
    const at::Tensor g = grads[0].to(acc);
    const at::Tensor n = x.to(acc).mul(rstd);  // normalized input (never in place: x may be float already)
    at::Tensor dw;
    if (w.requires_grad()) {
      // Forward rounds n to x.dtype before the weight multiply; use the same rounded n for dw.
      const at::Tensor n_rounded = n.to(x.scalar_type()).to(acc);
      dw = g.mul(n_rounded).reshape({-1, x.size(-1)}).sum(0).to(w.scalar_type());
    }
    at::Tensor gn = g.mul(w.to(acc));
    const at::Tensor mean_gn_n = gn.mul(n).mean(-1, true);
    const at::Tensor dx = gn.sub_(n.mul(mean_gn_n)).mul_(rstd).to(x.scalar_type());
    return {dx, dw, at::Tensor()};
  }
};

class SwigluDownFunction : public torch::autograd::Function<SwigluDownFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& u, const at::Tensor& wd) {
    ctx->save_for_backward({g, u, wd});
    return at::linear(at::silu(g).mul_(u), wd);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor &g = s[0], &u = s[1], &wd = s[2];
    const at::Tensor& dy = grads[0];
    // At most four T x I buffers live at once (memory_planner.cpp counts four).
    at::Tensor sig = at::sigmoid(g);
    at::Tensor silu = g.mul(sig);
    at::Tensor dwd;
    if (wd.requires_grad())
      dwd = at::matmul(dy.reshape({-1, dy.size(-1)}).t(), silu.mul(u).reshape({-1, g.size(-1)}));
    at::Tensor dm = at::matmul(dy, wd);
    at::Tensor du = dm.mul(silu);
    // d silu(g)/dg = sig * (1 + g * (1 - sig)) = sig * (1 + g - silu), built in silu's buffer.
    silu.neg_().add_(g).add_(1).mul_(sig);
    sig.reset();
    dm.mul_(silu).mul_(u);  // now d(gate)
    return {dm, du, dwd};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor swiglu_down(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down_weight) {
  return SwigluDownFunction::apply(gate, up, down_weight);
}

models::RopeFrequencies drafter_rope(const DrafterConfig& c, const at::Tensor& positions) {
  int64_t seq_len = 0;
  if (c.rope.type == "dynamic" && positions.numel() > 0) seq_len = positions.max().item<int64_t>() + 1;
  return models::rope_frequencies(c.rope, c.head_dim, c.max_position_embeddings, seq_len, at::kDouble);
}

std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, const models::RopeFrequencies& f,
                                              at::ScalarType dtype) {
  const at::Tensor angles = positions.to(at::kDouble).unsqueeze(-1).mul(f.inv_freq.to(positions.device()));  // [b, L, D/2]
  const at::Tensor emb = at::cat({angles, angles}, -1).unsqueeze(2);                                       // [b, L, 1, D]
  at::Tensor cos = emb.cos(), sin = emb.sin();
  if (f.attention_scaling != 1.0) cos.mul_(f.attention_scaling), sin.mul_(f.attention_scaling);
  return {cos.to(dtype), sin.to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
  return x.mul(cos).add_(rotated.mul(sin));
}

}  // namespace dflash::drafter
