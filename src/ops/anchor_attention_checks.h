// Argument validation shared by the CPU and CUDA registrations of the attention op.
#pragma once
#include <optional>

#include <ATen/core/Tensor.h>

#include "anchor_attention.h"

namespace dflash::ops {

struct AttentionDims {
  int64_t batch, num_blocks, block_size, context_len, q_heads, kv_heads, head_dim;
};

// TORCH_CHECKs every shape, dtype, device and stride rule and names the offending value. ctx_start may be
// undefined (every block's context starts at key 0).
AttentionDims check_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                   int64_t window, const at::Tensor& ctx_start = at::Tensor());

// Every tensor argument on q's device, checked before the op dispatches (the dispatcher would otherwise pick a
// kernel by the odd tensor out and say only that none is registered, e.g. for a meta tensor). `op` names the op.
void check_attention_devices(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& anchors, const at::Tensor& keep, const at::Tensor& ctx_start);

// Raw-pointer view of the tensors for the kernels (anchors/keep/ctx_start of shape [N] broadcast over batch).
kernels::AnchorAttentionArgs make_kernel_args(const AttentionDims& d, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const at::Tensor& anchors,
                                              const at::Tensor& keep, int64_t window, double scale,
                                              const at::Tensor& ctx_start = at::Tensor());

// The softmax scale a caller gave (None: 1/sqrt(head_dim)): a finite number in (0, 1000] (not subnormal), else a
// TORCH_CHECK error naming it; NaN or inf gave NaN outputs without a word. Returns it.
double checked_attention_scale(double scale);

// The schema's `Tensor? ctx_start` as a possibly undefined tensor.
inline at::Tensor ctx_start_or_undefined(const std::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }

// The forward's saved LSE must be a contiguous [batch, Hq, N*B] tensor of the accumulation dtype.
void check_saved_lse(const at::Tensor& lse, const AttentionDims& d, at::ScalarType acc);

// The CUDA kernels read rows of q, k, v and dout in 16-byte pieces (kernels::cuda::rows_aligned16, which the
// launchers check too): `t` itself when it qualifies, else a contiguous copy.
at::Tensor cuda_aligned_rows(const at::Tensor& t);

struct BackwardOutputs {
  at::Tensor dq, dk, dv;
};
// Allocates dq (uninitialised) and dk, dv (zero: keys nobody sees keep a zero gradient) and points
// the kernel arguments at out, lse, dout and the three gradients.
BackwardOutputs bind_backward_tensors(kernels::AnchorAttentionArgs& args, const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                      const at::Tensor& dout);

}  // namespace dflash::ops
