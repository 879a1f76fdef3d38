#include "hybrid_norms.h"

#include <ATen/ATen.h>

#include "gated_deltanet.h"

namespace dflash::models {
namespace {

at::Tensor normalized(const at::Tensor& x, double eps) {
  const at::Tensor xs = x.to(gdn::state_dtype(x.scalar_type()));
  return xs * at::rsqrt(xs.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

}  // namespace

at::Tensor zero_centred_scale(const at::Tensor& w, at::ScalarType dtype) {
  return w.to(dtype).to(gdn::state_dtype(dtype)) + 1.0;
}

at::Tensor hybrid_rms_norm(const at::Tensor& x, const at::Tensor& scale, double eps) {
  return (normalized(x, eps) * scale).to(x.scalar_type());
}

at::Tensor gated_rms_norm(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& w, double eps) {
  const at::ScalarType dt = x.scalar_type();
  const at::Tensor h = w * normalized(x, eps).to(dt);
  return (h * at::silu(gate.to(gdn::state_dtype(dt)))).to(dt);
}

}  // namespace dflash::models
