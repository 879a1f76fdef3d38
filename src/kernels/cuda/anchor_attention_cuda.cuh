// Fused DFlash anchor-block attention on NVIDIA GPUs (sm_80 and newer): forward and backward,
// FlashAttention-2 style on tensor cores (mma.sync m16n8k16, bf16 or fp16 in, fp32 accumulation).
// Framework-free: raw pointers and element strides from AnchorAttentionArgs (anchor_attention.h);
// this header is plain C++ so host code can include it without nvcc.
//
// Work layout (mirrors the CPU kernel):
//  * plan: per batch, the kept blocks sorted by (anchor, index) -> order[], sorted_anchor[], nkept[];
//    also counts anchors / ctx_start outside [0, S] into a status the caller reads later (no host sync).
//    The rows of one (batch, KV head) are numbered in that order: row R = i*G*B + g*B + j is slot j
//    of q-head h*G+g of the i-th kept block, so a tile of consecutive rows covers blocks with similar
//    anchors and their context ranges overlap (GQA without expanding K/V).
//  * forward: one CTA per 64-row tile x KV head; online softmax over the union of its rows' context
//    ranges, then each block's own keys; writes O and the LSE of kept rows only.
//  * backward: one CTA per key tile x KV head (context tiles, then each block's own keys), looping
//    over exactly the blocks that see the tile; owns dK/dV of its keys (no atomics). dQ is added in
//    fp32 with atomicAdd into a per-chunk accumulator and converted at the end, or, deterministic,
//    summed in registers by one CTA per row tile (like the forward) in a fixed order.
// Tile sizes are chosen per launch from the device's shared memory (anchor_attention_cuda_host.h).
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "anchor_attention.h"
#include "anchor_attention_cuda_host.h"

namespace dflash::kernels::cuda {

// Builds the plan on the device (no host synchronisation).
cudaError_t anchor_attention_cuda_plan(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                       cudaStream_t stream);

// Writes out and lse (float [batch, Hq, N*B]) for kept rows with tile configuration `fwd`; the caller
// zero-fills out and fills lse with -inf beforehand so dropped blocks read as zero output / -inf.
cudaError_t anchor_attention_cuda_forward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                          const TileConfig& fwd, cudaStream_t stream);

// Reads q, k, v, out, lse, dout; writes dq, dk and dv (which the caller zero-fills: keys nobody sees keep
// a zero gradient; in the deterministic mode dq too, since rows of dropped blocks are not written).
cudaError_t anchor_attention_cuda_backward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                           const BackwardPlan& w, cudaStream_t stream);

// Static shared memory of configuration c's kernel on the current device (cudaFuncGetAttributes). Fails (e.g.
// "no kernel image is available") when this build holds no code the device runs.
cudaError_t anchor_attention_cuda_static_smem(const TileConfig& c, ScalarType dtype, int64_t* bytes);

}  // namespace dflash::kernels::cuda
