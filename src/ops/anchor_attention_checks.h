// Argument validation shared by the CPU and CUDA registrations of the attention op.
#pragma once
#include <ATen/core/Tensor.h>

#include "anchor_attention.h"

namespace dflash::ops {

struct AttentionDims {
  int64_t batch, num_blocks, block_size, context_len, q_heads, kv_heads, head_dim;
};

// TORCH_CHECKs every shape, dtype, device and stride rule and names the offending value.
AttentionDims check_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                   int64_t window);

// Raw-pointer view of the tensors for the kernels (anchors/keep of shape [N] broadcast over batch).
kernels::AnchorAttentionArgs make_kernel_args(const AttentionDims& d, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const at::Tensor& anchors,
                                              const at::Tensor& keep, int64_t window, double scale);

// The forward's saved LSE must be a contiguous [batch, Hq, N*B] tensor of the accumulation dtype.
void check_saved_lse(const at::Tensor& lse, const AttentionDims& d, at::ScalarType acc);

struct BackwardOutputs {
  at::Tensor dq, dk, dv;
};
// Allocates dq (uninitialised) and dk, dv (zero: keys nobody sees keep a zero gradient) and points
// the kernel arguments at out, lse, dout and the three gradients.
BackwardOutputs bind_backward_tensors(kernels::AnchorAttentionArgs& args, const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                      const at::Tensor& dout);

}  // namespace dflash::ops
