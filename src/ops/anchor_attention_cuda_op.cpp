// CUDA implementations of dflash::anchor_block_attention_{fwd,bwd}: checks, the device-side plan and
// the kernels of src/kernels/cuda on the current stream. Extra memory is O(N*B) (LSE, delta, an fp32
// dQ accumulator and the plan), never S x (N*B).
#include <limits>
#include <string>

#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "anchor_attention.h"
#include "anchor_attention_checks.h"
#include "anchor_attention_cuda.cuh"

namespace dflash::ops {
namespace {

namespace kc = kernels::cuda;

void check_cuda(const at::Tensor& q, const kernels::AnchorAttentionArgs& a) {
  TORCH_CHECK(q.is_cuda(), "anchor_block_attention (CUDA): q must be a CUDA tensor, got ", q.device());
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "anchor_block_attention (CUDA): dtype must be bfloat16 or float16, got ", q.scalar_type(),
              " (use the CPU op for float32/float64)");
  const char* why = kc::anchor_attention_cuda_unsupported(a.shape);
  TORCH_CHECK(why == nullptr, "anchor_block_attention (CUDA): ", why ? why : "", " (got head_dim ", a.shape.head_dim,
              ", q heads ", a.shape.q_heads, ", kv heads ", a.shape.kv_heads, ", S ", a.shape.context_len, ", N*B ",
              a.shape.num_blocks * a.shape.block_size, ")");
}

// The kernels read rows in 16-byte pieces: the data pointer must be 16-byte aligned and every stride
// used with a non-zero index a multiple of 8 elements. Copies the tensor when it is not.
at::Tensor aligned_rows(const at::Tensor& t) {
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(3) == 1;
  for (int64_t dim = 0; dim < 3; ++dim) ok = ok && (t.size(dim) <= 1 || t.stride(dim) % 8 == 0);
  return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}

// anchors and ctx_start must lie in [0, S]. One small device-to-host copy each; the slow path finds the
// offending entry.
void check_anchor_range(const at::Tensor& anchors, const at::Tensor& ctx_start, kernels::AnchorAttentionArgs args) {
  bool ok = true;
  for (const at::Tensor* t : {&anchors, &ctx_start}) {
    if (!t->defined() || t->numel() == 0) continue;
    const auto [mn, mx] = at::aminmax(*t);
    const at::Tensor both = at::stack({mn, mx}).cpu();
    ok = ok && both.data_ptr<int64_t>()[0] >= 0 && both.data_ptr<int64_t>()[1] <= args.shape.context_len;
  }
  if (ok) return;
  const at::Tensor host = anchors.cpu();
  const at::Tensor host_cs = ctx_start.defined() ? ctx_start.cpu() : at::Tensor();
  args.anchors = host.data_ptr<int64_t>();
  args.ctx_start = host_cs.defined() ? host_cs.data_ptr<int64_t>() : nullptr;
  const std::string bad = kernels::check_anchor_values(args);
  TORCH_CHECK(false, "anchor_block_attention: ", bad.empty() ? "anchors or ctx_start outside [0, S]" : bad);
}

struct DevicePlan {
  at::Tensor order, sorted_anchor, nkept;
  kc::AnchorAttentionCudaPlan view() const {
    return {order.data_ptr<int32_t>(), sorted_anchor.data_ptr<int32_t>(), nkept.data_ptr<int32_t>()};
  }
};

void cuda_ok(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "anchor_block_attention (CUDA): ", what, " failed: ", cudaGetErrorString(err));
}

DevicePlan make_plan(const kernels::AnchorAttentionArgs& args, const at::Tensor& q, cudaStream_t stream) {
  const auto opts = q.options().dtype(at::kInt);
  const int64_t n = args.shape.batch * args.shape.num_blocks;
  DevicePlan p{at::empty({n}, opts), at::empty({n}, opts), at::zeros({args.shape.batch}, opts)};
  cuda_ok(kc::anchor_attention_cuda_plan(args, p.view(), stream), "plan kernel launch");
  return p;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> anchor_attention_fwd_cuda(const at::Tensor& q_in, const at::Tensor& k_in,
                                                              const at::Tensor& v_in, const at::Tensor& anchors,
                                                              const at::Tensor& keep, int64_t block_size,
                                                              int64_t window, double scale,
                                                              const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, ctx_start);
  const c10::cuda::CUDAGuard guard(q_in.device());
  const at::Tensor q = aligned_rows(q_in), k = aligned_rows(k_in), v = aligned_rows(v_in);
  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  check_cuda(q, args);
  check_anchor_range(anchors, ctx_start, args);

  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = at::full({d.batch, d.q_heads, d.num_blocks * d.block_size},
                            -std::numeric_limits<double>::infinity(), q.options().dtype(at::kFloat));
  args.out = {out.data_ptr(), out.stride(0), out.stride(1), out.stride(2)};
  args.lse = lse.data_ptr();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  const DevicePlan plan = make_plan(args, q, stream);
  cuda_ok(kc::anchor_attention_cuda_forward(args, plan.view(), stream), "forward kernel launch");
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_attention_bwd_cuda(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep,
    int64_t block_size, int64_t window, double scale, const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, ctx_start);
  const c10::cuda::CUDAGuard guard(q_in.device());
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "anchor_block_attention_bwd: dout and out must have the shape of q ", q_in.sizes());
  TORCH_CHECK(dout_in.device() == q_in.device() && out_in.device() == q_in.device() && lse.device() == q_in.device(),
              "anchor_block_attention_bwd: dout, out and lse must be on ", q_in.device());
  check_saved_lse(lse, d, at::kFloat);
  const at::Tensor q = aligned_rows(q_in), k = aligned_rows(k_in), v = aligned_rows(v_in);
  const at::Tensor dout =
      aligned_rows(dout_in.scalar_type() == q.scalar_type() ? dout_in : dout_in.to(q.scalar_type()));
  const at::Tensor o = out_in.scalar_type() == q.scalar_type() && out_in.stride(3) == 1
                           ? out_in
                           : out_in.to(q.scalar_type()).contiguous();
  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  check_cuda(q, args);
  // Anchors and ctx_start were validated by the forward; the kernels clamp them to [0, S], so a direct
  // call with bad values stays in bounds.

  const BackwardOutputs g = bind_backward_tensors(args, q, k, v, o, lse, dout);

  const auto fopts = q.options().dtype(at::kFloat);
  at::Tensor delta = at::empty({kc::anchor_attention_cuda_delta_numel(args.shape)}, fopts);
  at::Tensor dq_acc = at::zeros({kc::anchor_attention_cuda_dq_acc_numel(args.shape)}, fopts);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  const DevicePlan plan = make_plan(args, q, stream);
  cuda_ok(kc::anchor_attention_cuda_backward(args, plan.view(), delta.data_ptr<float>(), dq_acc.data_ptr<float>(),
                                             stream),
          "backward kernel launch");
  return {g.dq, g.dk, g.dv};
}

TORCH_LIBRARY_IMPL(dflash, CUDA, m) {
  m.impl("anchor_block_attention_fwd", &anchor_attention_fwd_cuda);
  m.impl("anchor_block_attention_bwd", &anchor_attention_bwd_cuda);
}

}  // namespace dflash::ops
