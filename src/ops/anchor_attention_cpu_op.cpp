// CPU implementations of dflash::anchor_block_attention_{fwd,bwd}: checks, then the kernel's work
// items spread over the intra-op thread pool.
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "anchor_attention.h"
#include "anchor_attention_checks.h"

namespace dflash::ops {
namespace {

constexpr int64_t kMaxCpuHeadDim = 512;

void check_cpu(const at::Tensor& q, const AttentionDims& d) {
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kDouble,
              "anchor_block_attention (CPU): dtype must be float32, bfloat16 or float64, got ", q.scalar_type());
  TORCH_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxCpuHeadDim, "anchor_block_attention (CPU): head_dim must be in [1, ",
              kMaxCpuHeadDim, "], got ", d.head_dim);
}

at::ScalarType acc_type(const at::Tensor& q) { return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Runs fn(chunk) for chunk in [0, n) on the intra-op pool.
template <typename F>
void parallel_chunks(int64_t n, F fn) {
  at::parallel_for(0, n, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(c);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> anchor_attention_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                             const at::Tensor& v, const at::Tensor& anchors,
                                                             const at::Tensor& keep, int64_t block_size,
                                                             int64_t window, double scale,
                                                             const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q, k, v, anchors, keep, block_size, window, ctx_start);
  check_cpu(q, d);
  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  const std::string bad = kernels::check_anchor_values(args);
  TORCH_CHECK(bad.empty(), "anchor_block_attention: ", bad);

  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = at::full({d.batch, d.q_heads, d.num_blocks * d.block_size},
                            -std::numeric_limits<double>::infinity(), q.options().dtype(acc_type(q)));
  args.out = {out.data_ptr(), out.stride(0), out.stride(1), out.stride(2)};
  args.lse = lse.data_ptr();
  const kernels::AnchorAttentionPlan plan = kernels::plan_anchor_attention(args);
  // Items are dealt round-robin to chunks: neighbouring items cost about the same, so chunks balance.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), int64_t(plan.fwd.size())));
  parallel_chunks(chunks, [&](int64_t c) { kernels::anchor_attention_forward(args, plan, c, chunks); });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_attention_bwd_cpu(
    const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
    double scale, const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q, k, v, anchors, keep, block_size, window, ctx_start);
  check_cpu(q, d);
  TORCH_CHECK(dout_in.sizes() == q.sizes() && out.sizes() == q.sizes(),
              "anchor_block_attention_bwd: dout and out must have the shape of q ", q.sizes());
  check_saved_lse(lse, d, acc_type(q));
  const at::Tensor dout = dout_in.scalar_type() == q.scalar_type() ? dout_in.contiguous()
                                                                   : dout_in.to(q.scalar_type()).contiguous();
  const at::Tensor o = out.stride(3) == 1 ? out : out.contiguous();

  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  const std::string bad = kernels::check_anchor_values(args);
  TORCH_CHECK(bad.empty(), "anchor_block_attention: ", bad);
  const BackwardOutputs g = bind_backward_tensors(args, q, k, v, o, lse, dout);

  const kernels::AnchorAttentionPlan plan = kernels::plan_anchor_attention(args);
  const int64_t rows = kernels::anchor_attention_delta_numel(args.shape);
  at::Tensor delta = at::empty({rows}, q.options().dtype(acc_type(q)));
  at::parallel_for(0, rows, 256, [&](int64_t r0, int64_t r1) {
    kernels::anchor_attention_delta(args, delta.data_ptr(), r0, r1);
  });
  // A fixed number of dQ partitions (not one per thread) keeps the result independent of threading.
  const int64_t part_numel = kernels::anchor_attention_dq_partition_numel(args.shape);
  at::Tensor parts = at::zeros({plan.dq_partitions, part_numel}, q.options().dtype(acc_type(q)));
  parallel_chunks(plan.dq_partitions, [&](int64_t p) {
    kernels::anchor_attention_backward_partition(args, plan, delta.data_ptr(), p, parts[p].data_ptr());
  });
  at::parallel_for(0, rows, 256, [&](int64_t r0, int64_t r1) {
    kernels::anchor_attention_reduce_dq(args, plan, parts.data_ptr(), r0, r1);
  });
  return {g.dq, g.dk, g.dv};
}

TORCH_LIBRARY_IMPL(dflash, CPU, m) {
  m.impl("anchor_block_attention_fwd", &anchor_attention_fwd_cpu);
  m.impl("anchor_block_attention_bwd", &anchor_attention_bwd_cpu);
}

}  // namespace dflash::ops
