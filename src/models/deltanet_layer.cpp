#include "deltanet_layer.h"

#include <ATen/ATen.h>

#include <cmath>

#include "few_rows_linear.h"
#include "gated_deltanet.h"
#include "hybrid_norms.h"

namespace dflash::models {

DeltaNetOutput deltanet_forward(const DeltaNetWeights& w, const LinearAttentionConfig& cfg, double eps,
                                const at::Tensor& h, const at::Tensor& conv0, const at::Tensor& rec0) {
  const int64_t B = h.size(0), T = h.size(1);
  const int64_t Hk = cfg.num_key_heads, Hv = cfg.num_value_heads, Dk = cfg.key_head_dim, Dv = cfg.value_head_dim;
  const at::ScalarType dt = h.scalar_type(), st = gdn::state_dtype(dt);
  DeltaNetOutput r;
  r.record.conv_in = few_rows_linear(h, w.in_qkv).transpose(1, 2);  // [B, conv_dim, T]
  auto [mixed, conv] = gdn::causal_conv(r.record.conv_in, conv0, w.conv);
  r.conv = std::move(conv);
  mixed = mixed.transpose(1, 2);                                      // [B, T, conv_dim]
  const at::Tensor q = gdn::l2_normalize(mixed.narrow(-1, 0, Hk * Dk).reshape({B, T, Hk, Dk}).to(st)) *
                       (1.0 / std::sqrt(static_cast<double>(Dk)));
  r.record.k = gdn::l2_normalize(mixed.narrow(-1, Hk * Dk, Hk * Dk).reshape({B, T, Hk, Dk}).to(st));
  r.record.v = mixed.narrow(-1, 2 * Hk * Dk, Hv * Dv).reshape({B, T, Hv, Dv}).to(st);
  r.record.beta = at::sigmoid(few_rows_linear(h, w.in_b)).to(st);
  // transformers rounds a (and A_log) to float32 before the softplus, whatever the model dtype.
  r.record.g = w.neg_A * at::softplus(few_rows_linear(h, w.in_a).to(at::kFloat).to(st) + w.dt_bias);
  const int64_t rep = Hv / Hk;
  const at::Tensor qr = gdn::repeat_heads(q, rep), kr = gdn::repeat_heads(r.record.k, rep);
  auto [o, rec] = T == 1 ? gdn::recurrent(qr, kr, r.record.v, r.record.g, r.record.beta, rec0)
                         : gdn::chunked(qr, kr, r.record.v, r.record.g, r.record.beta, rec0);
  r.rec = std::move(rec);
  const at::Tensor z = few_rows_linear(h, w.in_z).reshape({B, T, Hv, Dv});
  const at::Tensor normed = gated_rms_norm(o.to(dt), z, w.norm, eps);  // per head over Dv
  r.out = few_rows_linear(normed.reshape({B, T, Hv * Dv}), w.out);
  return r;
}

}  // namespace dflash::models
