// The ways people run the DFlash mask without our kernel, in LibTorch, for `dflash bench attention`.
// Same inputs and outputs as dflash::ops::anchor_block_attention.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace dflash::bench {

// Materialised [batch, Tq, S+N*B] mask, K/V expanded to every q-head, softmax under autograd.
at::Tensor dense_masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                  int64_t window, double scale);

// The seed's approach: per block, gather the context prefix plus the block's own keys, expand GQA heads
// with repeat_interleave, run batched SDPA with a boolean mask, `chunk_blocks` blocks at a time.
at::Tensor per_block_sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                    int64_t window, double scale, int64_t chunk_blocks);

// Bytes each one keeps alive for backward (the dominant terms), to skip runs that cannot fit.
double dense_predicted_bytes(int64_t batch, int64_t Tq, int64_t Tk, int64_t Hq, int64_t elem_bytes);
double per_block_sdpa_predicted_bytes(int64_t batch, int64_t N, int64_t B, int64_t S, int64_t Hq, int64_t D,
                                      int64_t elem_bytes);

}  // namespace dflash::bench
