#include "batched_decode_attention.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "decode_attention.h"

namespace dflash::models {
namespace {

bool kernel_applies(const at::Tensor& q, const std::vector<KVCache*>& caches, int layer) {
  if (!q.device().is_cpu() || (q.scalar_type() != at::kFloat && q.scalar_type() != at::kDouble)) return false;
  for (const KVCache* c : caches) {
    const at::Tensor& k = c->keys(layer);
    if (!k.device().is_cpu() || k.scalar_type() != q.scalar_type() || k.stride(3) != 1 ||
        k.stride(2) != q.size(3) || c->values(layer).strides() != k.strides())
      return false;
  }
  return true;
}

}  // namespace

at::Tensor batched_decode_attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const std::vector<KVCache*>& caches, bool use_kernel) {
  const int64_t B = q.size(0);
  if (!use_kernel || !kernel_applies(q, caches, layer)) {
    std::vector<at::Tensor> attn(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      auto [k_all, v_all] = caches[b]->store(layer, k.narrow(0, b, 1), v.narrow(0, b, 1));
      attn[b] = at::scaled_dot_product_attention(q.narrow(0, b, 1), k_all, v_all, {}, 0.0, false, std::nullopt,
                                                 /*enable_gqa=*/true);
    }
    return B == 1 ? attn[0] : at::cat(attn, 0);
  }
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty_like(qc);
  std::vector<void*> kp(static_cast<size_t>(B)), vp(static_cast<size_t>(B));
  std::vector<int64_t> past(static_cast<size_t>(B)), head_stride(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    KVCache& c = *caches[b];
    if (c.length() + 1 > c.capacity()) throw std::length_error("batched_decode_attention: KV cache full");
    kp[b] = c.keys(layer).data_ptr();
    vp[b] = c.values(layer).data_ptr();
    past[b] = c.length();
    head_stride[b] = c.keys(layer).stride(1);
  }
  kernels::DecodeAttentionArgs a;
  a.dtype = q.scalar_type() == at::kDouble ? kernels::ScalarType::Float64 : kernels::ScalarType::Float32;
  a.batch = B, a.q_heads = q.size(1), a.kv_heads = k.size(1), a.head_dim = q.size(3);
  a.q = qc.data_ptr(), a.q_sb = qc.stride(0), a.q_sh = qc.stride(1);
  a.k_new = kc.data_ptr(), a.v_new = vc.data_ptr(), a.new_sb = kc.stride(0), a.new_sh = kc.stride(1);
  a.k_cache = kp.data(), a.v_cache = vp.data(), a.cache_sh = head_stride.data(), a.cache_st = a.head_dim;
  a.past = past.data();
  a.out = out.data_ptr(), a.out_sb = out.stride(0), a.out_sh = out.stride(1);
  a.scale = 1.0 / std::sqrt(double(a.head_dim));
  if (const std::string err = kernels::check_decode_attention(a); !err.empty()) throw std::invalid_argument(err);
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) { kernels::decode_attention_cpu(a, b0, b1); });
  return out;
}

}  // namespace dflash::models
