// Fused DFlash anchor-block attention on NVIDIA GPUs (sm_80 and newer): forward and backward,
// FlashAttention-2 style on tensor cores (mma.sync m16n8k16, bf16 or fp16 in, fp32 accumulation).
// Framework-free: raw pointers and element strides from AnchorAttentionArgs (anchor_attention.h);
// this header is plain C++ so host code can include it without nvcc.
//
// Work layout (mirrors the CPU kernel):
//  * plan: per batch, the kept blocks sorted by (anchor, index) -> order[], sorted_anchor[], nkept[].
//    The rows of one (batch, KV head) are numbered in that order: row R = i*G*B + g*B + j is slot j
//    of q-head h*G+g of the i-th kept block, so a tile of consecutive rows covers blocks with similar
//    anchors and their context ranges overlap (GQA without expanding K/V).
//  * forward: one CTA per 64-row tile x KV head; online softmax over the union of its rows' context
//    ranges, then each block's own keys; writes O and the LSE of kept rows only.
//  * backward: one CTA per key tile x KV head (context tiles, then each block's own keys), looping
//    over exactly the blocks that see the tile; owns dK/dV of its keys (no atomics); dQ is added in
//    fp32 with atomicAdd into dq_acc [batch, Hq, N*B, D] and converted at the end.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "anchor_attention.h"

namespace dflash::kernels::cuda {

// Why this shape cannot run on the GPU kernels (dtype, head dim, sizes), or nullptr when it can.
const char* anchor_attention_cuda_unsupported(const AnchorAttentionShape& s);

// Device buffers the caller allocates (sizes in elements).
struct AnchorAttentionCudaPlan {
  int32_t* order = nullptr;          // [batch * N]: kept block indices sorted by anchor
  int32_t* sorted_anchor = nullptr;  // [batch * N]: their anchors, clamped to [0, S]
  int32_t* nkept = nullptr;          // [batch]
};

// Builds the plan on the device (no host synchronisation).
cudaError_t anchor_attention_cuda_plan(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                       cudaStream_t stream);

// Writes out and lse (float [batch, Hq, N*B]) for kept rows; the caller zero-fills out and fills
// lse with -inf beforehand so dropped blocks read as zero output / -inf.
cudaError_t anchor_attention_cuda_forward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                          cudaStream_t stream);

// Workspace of the backward, in floats: delta [batch, Hq, N*B] and dq_acc [batch, Hq, N*B, D].
int64_t anchor_attention_cuda_delta_numel(const AnchorAttentionShape& s);
int64_t anchor_attention_cuda_dq_acc_numel(const AnchorAttentionShape& s);

// Reads q, k, v, out, lse, dout; writes dq (all rows), dk and dv (which the caller zero-fills:
// keys nobody sees keep a zero gradient). dq_acc must be zero-filled by the caller.
cudaError_t anchor_attention_cuda_backward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                           float* delta, float* dq_acc, cudaStream_t stream);

}  // namespace dflash::kernels::cuda
