// The LibTorch binding of the fused decode-attention kernel (src/kernels/decode_attention.h): one decode step
// of B sequences, each with a K/V cache of its own and its own length. Every sequence's new K/V row is stored
// at position past[b] of its cache and its one query attends over positions [0, past[b]]. CPU, float32 or
// float64; callers fall back to a per-sequence SDPA elsewhere (decode_attention_applies()).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

// Whether the kernel takes these inputs: CPU, float32/float64 everywhere, caches [1, Hkv, capacity, D] with
// rows contiguous in D and K/V sharing strides.
bool decode_attention_applies(const at::Tensor& q, const std::vector<at::Tensor>& k_caches,
                              const std::vector<at::Tensor>& v_caches);

// q [B, Hq, 1, D], k_new/v_new [B, Hkv, 1, D], caches as above with past[b] < capacity -> [B, Hq, 1, D].
// Scale 1/sqrt(D). Bad shapes or a full cache are errors.
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_new, const at::Tensor& v_new,
                            const std::vector<at::Tensor>& k_caches, const std::vector<at::Tensor>& v_caches,
                            const std::vector<int64_t>& past);

}  // namespace dflash::ops
