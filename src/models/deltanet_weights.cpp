#include "deltanet_weights.h"

#include <ATen/ATen.h>

#include "gated_deltanet.h"

namespace dflash::models {

DeltaNetWeights load_deltanet_weights(const LinearAttentionConfig& lc, int64_t H, at::ScalarType dtype,
                                      const std::function<at::Tensor(const std::string&, std::vector<int64_t>)>& load) {
  const at::ScalarType st = gdn::state_dtype(dtype);
  DeltaNetWeights w;
  w.in_qkv = load("linear_attn.in_proj_qkv.weight", {lc.conv_dim(), H});
  w.in_z = load("linear_attn.in_proj_z.weight", {lc.value_dim(), H});
  w.in_b = load("linear_attn.in_proj_b.weight", {lc.num_value_heads, H});
  w.in_a = load("linear_attn.in_proj_a.weight", {lc.num_value_heads, H});
  w.conv = load("linear_attn.conv1d.weight", {lc.conv_dim(), 1, lc.conv_kernel}).view({lc.conv_dim(), lc.conv_kernel});
  // transformers: -exp(A_log.float()) whatever the model dtype.
  w.neg_A = -load("linear_attn.A_log", {lc.num_value_heads}).to(at::kFloat).exp().to(st);
  w.dt_bias = load("linear_attn.dt_bias", {lc.num_value_heads}).to(st);
  w.norm = load("linear_attn.norm.weight", {lc.value_head_dim});
  w.out = load("linear_attn.out_proj.weight", {H, lc.value_dim()});
  return w;
}

}  // namespace dflash::models
