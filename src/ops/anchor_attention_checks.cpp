#include "anchor_attention_checks.h"

#include <cmath>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <utility>

#include "anchor_attention_cuda_host.h"

namespace dflash::ops {
namespace {

void check_index_tensor(const at::Tensor& t, const char* name, at::ScalarType want, int64_t batch,
                        int64_t n, const at::Tensor& q) {
  TORCH_CHECK(t.scalar_type() == want, "anchor_block_attention: ", name, " must have dtype ", want, ", got ",
              t.scalar_type());
  TORCH_CHECK(t.device() == q.device(), "anchor_block_attention: ", name, " is on ", t.device(),
              " but q is on ", q.device());
  TORCH_CHECK((t.dim() == 1 && t.size(0) == n) || (t.dim() == 2 && t.size(0) == batch && t.size(1) == n),
              "anchor_block_attention: ", name, " must have shape [", n, "] or [", batch, ", ", n, "], got ",
              t.sizes());
  TORCH_CHECK(t.stride(-1) == 1 || n <= 1, "anchor_block_attention: ", name,
              " must be contiguous in its last dimension");
}

}  // namespace

void check_attention_devices(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& anchors, const at::Tensor& keep, const at::Tensor& ctx_start) {
  const std::pair<const char*, const at::Tensor*> named[] = {
      {"k", &k}, {"v", &v}, {"anchors", &anchors}, {"keep", &keep}, {"ctx_start", &ctx_start}};
  for (const auto& [name, t] : named)
    TORCH_CHECK(!t->defined() || t->device() == q.device(), op, ": ", name, " is on ", t->device(), " but q is on ",
                q.device(), "; every tensor argument must be on one device");
}

AttentionDims check_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                   int64_t window, const at::Tensor& ctx_start) {
  TORCH_CHECK(q.dim() == 4, "anchor_block_attention: q must be [batch, N*B, Hq, D], got shape ", q.sizes());
  TORCH_CHECK(k.dim() == 4, "anchor_block_attention: k must be [batch, S+N*B, Hkv, D], got shape ", k.sizes());
  TORCH_CHECK(v.sizes() == k.sizes(), "anchor_block_attention: v must have the shape of k ", k.sizes(),
              ", got ", v.sizes());
  TORCH_CHECK(block_size >= 1, "anchor_block_attention: block_size must be >= 1, got ", block_size);
  TORCH_CHECK(window >= 0, "anchor_block_attention: window must be >= 0 (0 = no sliding window), got ", window);
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), "anchor_block_attention: q, k, v must be on ",
              "one device, got ", q.device(), ", ", k.device(), ", ", v.device());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "anchor_block_attention: q, k, v must share a dtype, got ", q.scalar_type(), ", ", k.scalar_type(),
              ", ", v.scalar_type());
  AttentionDims d;
  d.batch = q.size(0);
  d.q_heads = q.size(2);
  d.head_dim = q.size(3);
  d.kv_heads = k.size(2);
  d.block_size = block_size;
  TORCH_CHECK(k.size(0) == d.batch, "anchor_block_attention: k has batch ", k.size(0), " but q has ", d.batch);
  TORCH_CHECK(k.size(3) == d.head_dim, "anchor_block_attention: k has head_dim ", k.size(3), " but q has ",
              d.head_dim);
  TORCH_CHECK(d.kv_heads >= 1 && d.q_heads % d.kv_heads == 0, "anchor_block_attention: q heads (", d.q_heads,
              ") must be a multiple of kv heads (", d.kv_heads, ")");
  TORCH_CHECK(q.size(1) % block_size == 0, "anchor_block_attention: q has ", q.size(1),
              " tokens, not a multiple of block_size ", block_size);
  d.num_blocks = q.size(1) / block_size;
  TORCH_CHECK(k.size(1) >= q.size(1), "anchor_block_attention: k has ", k.size(1),
              " tokens but must hold S context keys plus the ", q.size(1), " block keys");
  d.context_len = k.size(1) - q.size(1);
  for (const auto* t : {&q, &k, &v})
    TORCH_CHECK(t->size(3) <= 1 || t->stride(3) == 1,
                "anchor_block_attention: q, k, v must be contiguous in head_dim (stride 1), got strides ",
                t->strides(), "; call .contiguous()");
  check_index_tensor(anchors, "anchors", at::kLong, d.batch, d.num_blocks, q);
  check_index_tensor(keep, "keep", at::kBool, d.batch, d.num_blocks, q);
  if (ctx_start.defined()) check_index_tensor(ctx_start, "ctx_start", at::kLong, d.batch, d.num_blocks, q);
  return d;
}

double checked_attention_scale(double scale) {
  const bool normal = std::isfinite(scale) && std::fpclassify(scale) != FP_SUBNORMAL;
  TORCH_CHECK(normal && scale > 0 && scale <= 1000,
              "anchor_block_attention: scale must be a finite number in (0, 1000] (None: 1/sqrt(head_dim)), got ",
              std::isfinite(scale) ? c10::str(scale) : std::isnan(scale) ? "nan" : scale > 0 ? "inf" : "-inf");
  return scale;
}

kernels::AnchorAttentionArgs make_kernel_args(const AttentionDims& d, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const at::Tensor& anchors,
                                              const at::Tensor& keep, int64_t window, double scale,
                                              const at::Tensor& ctx_start) {
  kernels::AnchorAttentionArgs a;
  auto& s = a.shape;
  s.batch = d.batch;
  s.num_blocks = d.num_blocks;
  s.block_size = d.block_size;
  s.context_len = d.context_len;
  s.q_heads = d.q_heads;
  s.kv_heads = d.kv_heads;
  s.head_dim = d.head_dim;
  s.window = window;
  s.scale = checked_attention_scale(scale);
  switch (q.scalar_type()) {
    case at::kFloat: s.dtype = kernels::ScalarType::Float32; break;
    case at::kDouble: s.dtype = kernels::ScalarType::Float64; break;
    case at::kBFloat16: s.dtype = kernels::ScalarType::BFloat16; break;
    case at::kHalf: s.dtype = kernels::ScalarType::Float16; break;  // CUDA only; check_cpu rejects it
    default: TORCH_CHECK(false, "anchor_block_attention: unsupported dtype ", q.scalar_type());
  }
  a.q = {q.data_ptr(), q.stride(0), q.stride(1), q.stride(2)};
  a.k = {k.data_ptr(), k.stride(0), k.stride(1), k.stride(2)};
  a.v = {v.data_ptr(), v.stride(0), v.stride(1), v.stride(2)};
  a.anchors = anchors.data_ptr<int64_t>();
  a.anchors_sb = anchors.dim() == 2 ? anchors.stride(0) : 0;
  a.keep = keep.data_ptr<bool>();
  a.keep_sb = keep.dim() == 2 ? keep.stride(0) : 0;
  if (ctx_start.defined()) {
    a.ctx_start = ctx_start.data_ptr<int64_t>();
    a.ctx_start_sb = ctx_start.dim() == 2 ? ctx_start.stride(0) : 0;
  }
  return a;
}

at::Tensor cuda_aligned_rows(const at::Tensor& t) {
  const int64_t sizes[3] = {t.size(0), t.size(1), t.size(2)}, strides[3] = {t.stride(0), t.stride(1), t.stride(2)};
  const bool ok = (t.size(3) <= 1 || t.stride(3) == 1) && kernels::cuda::rows_aligned16(t.data_ptr(), sizes, strides);
  return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}

void check_saved_lse(const at::Tensor& lse, const AttentionDims& d, at::ScalarType acc) {
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == d.batch && lse.size(1) == d.q_heads &&
                  lse.size(2) == d.num_blocks * d.block_size && lse.is_contiguous() && lse.scalar_type() == acc,
              "anchor_block_attention_bwd: lse must be a contiguous ", acc, " tensor [", d.batch, ", ", d.q_heads, ", ",
              d.num_blocks * d.block_size, "], got ", lse.sizes(), " ", lse.scalar_type());
}

BackwardOutputs bind_backward_tensors(kernels::AnchorAttentionArgs& args, const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                      const at::Tensor& dout) {
  BackwardOutputs g{at::empty(q.sizes(), q.options()), at::zeros(k.sizes(), k.options()),
                    at::zeros(v.sizes(), v.options())};
  args.out = {out.data_ptr(), out.stride(0), out.stride(1), out.stride(2)};
  args.lse = lse.data_ptr();
  args.dout = {dout.data_ptr(), dout.stride(0), dout.stride(1), dout.stride(2)};
  args.dq = {g.dq.data_ptr(), g.dq.stride(0), g.dq.stride(1), g.dq.stride(2)};
  args.dk = {g.dk.data_ptr(), g.dk.stride(0), g.dk.stride(1), g.dk.stride(2)};
  args.dv = {g.dv.data_ptr(), g.dv.stride(0), g.dv.stride(1), g.dv.stride(2)};
  return g;
}

}  // namespace dflash::ops
