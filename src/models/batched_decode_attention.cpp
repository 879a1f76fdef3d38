#include "batched_decode_attention.h"

#include <ATen/ATen.h>

#include "decode_attention_op.h"

namespace dflash::models {

at::Tensor batched_decode_attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const std::vector<KVCache*>& caches, bool use_kernel) {
  const int64_t B = q.size(0);
  std::vector<at::Tensor> k_caches, v_caches;
  std::vector<int64_t> past;
  for (const KVCache* c : caches) {
    k_caches.push_back(c->keys(layer));
    v_caches.push_back(c->values(layer));
    past.push_back(c->length());
  }
  if (use_kernel && ops::decode_attention_applies(q, k_caches, v_caches))
    return ops::decode_attention(q, k, v, k_caches, v_caches, past);
  std::vector<at::Tensor> attn(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto [k_all, v_all] = caches[b]->store(layer, k.narrow(0, b, 1), v.narrow(0, b, 1));
    attn[b] = at::scaled_dot_product_attention(q.narrow(0, b, 1), k_all, v_all, {}, 0.0, false, std::nullopt,
                                               /*enable_gqa=*/true);
  }
  return B == 1 ? attn[0] : at::cat(attn, 0);
}

}  // namespace dflash::models
