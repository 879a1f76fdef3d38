#include "decode_attention_op.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "decode_attention.h"

namespace dflash::ops {

bool decode_attention_applies(const at::Tensor& q, const std::vector<at::Tensor>& k_caches,
                              const std::vector<at::Tensor>& v_caches) {
  if (!q.device().is_cpu() || (q.scalar_type() != at::kFloat && q.scalar_type() != at::kDouble)) return false;
  for (size_t b = 0; b < k_caches.size(); ++b) {
    const at::Tensor& k = k_caches[b];
    if (!k.device().is_cpu() || k.scalar_type() != q.scalar_type() || k.stride(3) != 1 || k.stride(2) != q.size(3) ||
        v_caches[b].strides() != k.strides())
      return false;
  }
  return true;
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_new, const at::Tensor& v_new,
                            const std::vector<at::Tensor>& k_caches, const std::vector<at::Tensor>& v_caches,
                            const std::vector<int64_t>& past) {
  const int64_t B = q.size(0);
  if (int64_t(k_caches.size()) != B || int64_t(v_caches.size()) != B || int64_t(past.size()) != B)
    throw std::invalid_argument("decode_attention: " + std::to_string(B) + " queries but " +
                                std::to_string(k_caches.size()) + " K caches, " + std::to_string(v_caches.size()) +
                                " V caches and " + std::to_string(past.size()) + " lengths");
  if (!decode_attention_applies(q, k_caches, v_caches))
    throw std::invalid_argument("decode_attention: needs CPU float32/float64 inputs and caches with rows contiguous "
                                "in head_dim (check decode_attention_applies first)");
  const at::Tensor qc = q.contiguous(), kc = k_new.contiguous(), vc = v_new.contiguous();
  at::Tensor out = at::empty_like(qc);
  std::vector<void*> kp(static_cast<size_t>(B)), vp(static_cast<size_t>(B));
  std::vector<int64_t> head_stride(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    if (past[b] < 0 || past[b] + 1 > k_caches[b].size(2))
      throw std::length_error("decode_attention: sequence " + std::to_string(b) + " has " + std::to_string(past[b]) +
                              " cached positions, its cache holds " + std::to_string(k_caches[b].size(2)));
    kp[b] = k_caches[b].data_ptr();
    vp[b] = v_caches[b].data_ptr();
    head_stride[b] = k_caches[b].stride(1);
  }
  kernels::DecodeAttentionArgs a;
  a.dtype = q.scalar_type() == at::kDouble ? kernels::ScalarType::Float64 : kernels::ScalarType::Float32;
  a.batch = B, a.q_heads = q.size(1), a.kv_heads = k_new.size(1), a.head_dim = q.size(3);
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

}  // namespace dflash::ops
