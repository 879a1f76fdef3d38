// The CUDA anchor-attention kernels run on the CPU under cuda_emu.h, exposed to Python as
//   torch.ops.dflash_emu.anchor_block_attention_fwd(q, k, v, anchors, keep, block_size, window, scale,
//                                                   ctx_start=None)
//   torch.ops.dflash_emu.anchor_block_attention_bwd(dout, q, k, v, out, lse, anchors, keep, block_size,
//                                                   window, scale, ctx_start=None)
// for CPU tensors (bf16 or fp16), so tests/python/test_attention_cuda_emulated.py can check the GPU
// code's index math, masking and synchronisation on a machine without a GPU. mma.sync is emulated
// from the PTX ISA's fragment layout (written here independently of the kernels' fragment loads).
//
// Every buffer the kernels touch sits between canary regions (NaN bit patterns): reading past a
// tensor poisons the result, and a write past one is reported.
#include "cuda_emu.h"

#include <limits>
#include <type_traits>

#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "anchor_attention_checks.h"
#include "anchor_attention_cuda_kernels.cuh"

namespace dflash::kernels::cuda {
namespace {

struct EmuBf16 {};
struct EmuF16 {};

float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16_bits(float f) {  // round to nearest even, like __floats2bfloat162_rn
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float f16_bits_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return float(h);
}
uint16_t float_to_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // round to nearest even
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: lane = 4*group + t, per the PTX ISA:
//   a0:(group, 2t..2t+1) a1:(group+8, 2t..) a2:(group, 2t+8..) a3:(group+8, 2t+8..)   of A 16x16
//   b0:(k 2t..2t+1, n group) b1:(k 2t+8.., n group)                                    of B 16x8
//   c0,c1:(group, 2t..2t+1) c2,c3:(group+8, 2t..2t+1)                                  of C 16x8
template <float (*cvt)(uint16_t)>
void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t mine[cuda_emu::kWords] = {a[0], a[1], a[2], a[3], b0, b1, 0, 0x3a3a0000u};
  const uint32_t* s = cuda_emu::warp_exchange(mine);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const uint32_t* d = s + l * cuda_emu::kWords;
    const int g = l >> 2, t = l & 3;
    auto lo = [](uint32_t x) { return cvt(uint16_t(x & 0xffffu)); };
    auto hi = [](uint32_t x) { return cvt(uint16_t(x >> 16)); };
    A[g][2 * t] = lo(d[0]);
    A[g][2 * t + 1] = hi(d[0]);
    A[g + 8][2 * t] = lo(d[1]);
    A[g + 8][2 * t + 1] = hi(d[1]);
    A[g][2 * t + 8] = lo(d[2]);
    A[g][2 * t + 9] = hi(d[2]);
    A[g + 8][2 * t + 8] = lo(d[3]);
    A[g + 8][2 * t + 9] = hi(d[3]);
    B[2 * t][g] = lo(d[4]);
    B[2 * t + 1][g] = hi(d[4]);
    B[2 * t + 8][g] = lo(d[5]);
    B[2 * t + 9][g] = hi(d[5]);
  }
  const int lane = cuda_emu::cur().lane, g = lane >> 2, t = lane & 3;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    double acc = 0;
    for (int k = 0; k < 16; ++k) acc += double(A[row][k]) * double(B[k][col]);
    c[e] = float(double(c[e]) + acc);
  }
}

template <>
struct Elem<EmuBf16> {
  static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_m16n8k16<bf16_bits_to_float>(c, a, b0, b1);
  }
  static uint32_t pack(float lo, float hi) {
    return uint32_t(float_to_bf16_bits(lo)) | (uint32_t(float_to_bf16_bits(hi)) << 16);
  }
  static float to_float(uint16_t bits) { return bf16_bits_to_float(bits); }
};
template <>
struct Elem<EmuF16> {
  static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_m16n8k16<f16_bits_to_float>(c, a, b0, b1);
  }
  static uint32_t pack(float lo, float hi) {
    return uint32_t(float_to_f16_bits(lo)) | (uint32_t(float_to_f16_bits(hi)) << 16);
  }
  static float to_float(uint16_t bits) { return f16_bits_to_float(bits); }
};

constexpr int64_t kCanary = 1024;  // elements on each side

// A tensor of `like`'s shape and dtype (contiguous) inside a larger buffer whose margins hold a
// canary bit pattern; check() reports any write into the margins.
struct Guarded {
  at::Tensor buf, view, canary;
  Guarded(at::IntArrayRef sizes, at::TensorOptions opt, double fill) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    buf = at::full({n + 2 * kCanary}, 0, opt);
    // All-ones bytes: NaN for every floating type, -1 for int32.
    at::Tensor bytes = buf.view(at::kByte);
    bytes.fill_(255);
    canary = buf.clone();
    view = buf.narrow(0, kCanary, n).view(sizes);
    view.fill_(fill);
  }
  static Guarded copy_of(const at::Tensor& t) {
    Guarded g(t.sizes(), t.options(), 0);
    g.view.copy_(t);
    return g;
  }
  void check(const char* name) const {
    const int64_t n = buf.numel() - 2 * kCanary;
    const bool ok = at::equal(buf.narrow(0, 0, kCanary).view(at::kByte), canary.narrow(0, 0, kCanary).view(at::kByte)) &&
                    at::equal(buf.narrow(0, kCanary + n, kCanary).view(at::kByte),
                              canary.narrow(0, kCanary + n, kCanary).view(at::kByte));
    TORCH_CHECK(ok, "cuda_emu: a kernel wrote outside ", name);
  }
};

struct EmuPlan {
  Guarded order, sorted_anchor, nkept;
};

EmuPlan run_plan(const AnchorAttentionArgs& a) {
  const auto& s = a.shape;
  const auto iopt = at::TensorOptions().dtype(at::kInt);
  EmuPlan p{Guarded({s.batch * s.num_blocks}, iopt, -7), Guarded({s.batch * s.num_blocks}, iopt, -7),
            Guarded({s.batch}, iopt, 0)};
  if (s.batch > 0 && s.num_blocks > 0) {
    const dim3 grid(unsigned((s.num_blocks + kPlanThreads - 1) / kPlanThreads), unsigned(s.batch));
    int32_t *o = p.order.view.data_ptr<int32_t>(), *sa = p.sorted_anchor.view.data_ptr<int32_t>(),
            *nk = p.nkept.view.data_ptr<int32_t>();
    cuda_emu::launch(grid, kPlanThreads, 0, [&] {
      plan_kernel(a.anchors, a.anchors_sb, a.keep, a.keep_sb, int(s.num_blocks), int(s.context_len), o, sa, nk);
    });
  }
  p.order.check("order");
  p.sorted_anchor.check("sorted_anchor");
  p.nkept.check("nkept");
  return p;
}

template <typename T, int D>
void forward_d(const Params& p, int batch) {
  constexpr int BN = fwd_keys_per_tile<D>();
  cuda_emu::launch(dim3(unsigned(fwd_row_tiles(p)), unsigned(p.Hkv), unsigned(batch)), kFwdThreads,
                   fwd_smem_bytes<D, BN>(), [&] { fwd_kernel<T, D, BN>(p); });
}

template <typename T, int D>
void backward_d(const Params& p, int batch, uint16_t* dq, Str dqs) {
  const int64_t rows = int64_t(batch) * p.Hq * p.Tq;
  if (rows > 0)
    cuda_emu::launch(dim3(unsigned((rows + kDeltaWarps - 1) / kDeltaWarps)), kDeltaWarps * 32, 0,
                     [&] { delta_kernel<T>(p, D, rows); });
  cuda_emu::launch(dim3(unsigned(bwd_items(p, bwd_keys_per_tile<D>())), unsigned(p.Hkv), unsigned(batch)), kBwdThreads, bwd_smem_bytes<D>(),
                   [&] { bwd_kernel<T, D>(p); });
  const int64_t total = rows * D;
  if (total > 0) {
    const int64_t blocks = std::min<int64_t>((total + kConvertThreads - 1) / kConvertThreads, 65536);
    cuda_emu::launch(dim3(unsigned(blocks)), kConvertThreads, 0, [&] { dq_convert_kernel<T>(p, D, dq, dqs, total); });
  }
}

template <typename F>
void dispatch(const at::Tensor& q, int64_t D, F&& f) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf, "dflash_emu: bf16 or fp16 only");
  const bool bf = q.scalar_type() == at::kBFloat16;
  switch (D) {
    case 64: return bf ? f(EmuBf16{}, std::integral_constant<int, 64>{}) : f(EmuF16{}, std::integral_constant<int, 64>{});
    case 128: return bf ? f(EmuBf16{}, std::integral_constant<int, 128>{}) : f(EmuF16{}, std::integral_constant<int, 128>{});
    case 256: return bf ? f(EmuBf16{}, std::integral_constant<int, 256>{}) : f(EmuF16{}, std::integral_constant<int, 256>{});
  }
  TORCH_CHECK(false, "dflash_emu: head_dim must be 64, 128 or 256, got ", D);
}

std::tuple<at::Tensor, at::Tensor> emu_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                           const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                           int64_t window, double scale, const std::optional<at::Tensor>& cs_opt) {
  const at::Tensor cs = ops::ctx_start_or_undefined(cs_opt);
  const ops::AttentionDims d = ops::check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, cs);
  const Guarded q = Guarded::copy_of(q_in), k = Guarded::copy_of(k_in), v = Guarded::copy_of(v_in);
  auto args = ops::make_kernel_args(d, q.view, k.view, v.view, anchors, keep, window, scale, cs);
  Guarded out(q_in.sizes(), q_in.options(), 0);
  Guarded lse({d.batch, d.q_heads, d.num_blocks * d.block_size}, q_in.options().dtype(at::kFloat),
              -std::numeric_limits<double>::infinity());
  args.out = {out.view.data_ptr(), out.view.stride(0), out.view.stride(1), out.view.stride(2)};
  args.lse = lse.view.data_ptr();
  const EmuPlan plan = run_plan(args);
  const Params p = make_params(args, plan.order.view.data_ptr<int32_t>(), plan.sorted_anchor.view.data_ptr<int32_t>(),
                               plan.nkept.view.data_ptr<int32_t>());
  if (d.batch > 0 && d.num_blocks > 0 && d.q_heads > 0)
    dispatch(q_in, d.head_dim, [&](auto t, auto dim) { forward_d<decltype(t), decltype(dim)::value>(p, int(d.batch)); });
  out.check("out");
  lse.check("lse");
  return {out.view, lse.view};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> emu_bwd(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                       const at::Tensor& k_in, const at::Tensor& v_in,
                                                       const at::Tensor& out_in, const at::Tensor& lse_in,
                                                       const at::Tensor& anchors, const at::Tensor& keep,
                                                       int64_t block_size, int64_t window, double scale,
                                                       const std::optional<at::Tensor>& cs_opt) {
  const at::Tensor cs = ops::ctx_start_or_undefined(cs_opt);
  const ops::AttentionDims d = ops::check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, cs);
  const Guarded q = Guarded::copy_of(q_in), k = Guarded::copy_of(k_in), v = Guarded::copy_of(v_in);
  const Guarded dout = Guarded::copy_of(dout_in.to(q_in.scalar_type())), o = Guarded::copy_of(out_in);
  const Guarded lse = Guarded::copy_of(lse_in.to(at::kFloat));
  auto args = ops::make_kernel_args(d, q.view, k.view, v.view, anchors, keep, window, scale, cs);
  Guarded dq(q_in.sizes(), q_in.options(), 0), dk(k_in.sizes(), k_in.options(), 0), dv(v_in.sizes(), v_in.options(), 0);
  const int64_t rows = d.batch * d.q_heads * d.num_blocks * d.block_size;
  Guarded delta({rows}, q_in.options().dtype(at::kFloat), 0), dq_acc({rows * d.head_dim}, q_in.options().dtype(at::kFloat), 0);
  args.out = {o.view.data_ptr(), o.view.stride(0), o.view.stride(1), o.view.stride(2)};
  args.lse = lse.view.data_ptr();
  args.dout = {dout.view.data_ptr(), dout.view.stride(0), dout.view.stride(1), dout.view.stride(2)};
  args.dq = {dq.view.data_ptr(), dq.view.stride(0), dq.view.stride(1), dq.view.stride(2)};
  args.dk = {dk.view.data_ptr(), dk.view.stride(0), dk.view.stride(1), dk.view.stride(2)};
  args.dv = {dv.view.data_ptr(), dv.view.stride(0), dv.view.stride(1), dv.view.stride(2)};
  const EmuPlan plan = run_plan(args);
  Params p = make_params(args, plan.order.view.data_ptr<int32_t>(), plan.sorted_anchor.view.data_ptr<int32_t>(),
                         plan.nkept.view.data_ptr<int32_t>());
  p.delta = delta.view.data_ptr<float>();
  p.dq_acc = dq_acc.view.data_ptr<float>();
  if (d.batch > 0 && d.num_blocks > 0 && d.q_heads > 0)
    dispatch(q_in, d.head_dim, [&](auto t, auto dim) {
      backward_d<decltype(t), decltype(dim)::value>(p, int(d.batch), static_cast<uint16_t*>(args.dq.data),
                                                    str_of(args.dq));
    });
  for (const auto* g : {&dq, &dk, &dv, &delta, &dq_acc}) g->check("a gradient or workspace buffer");
  return {dq.view, dk.view, dv.view};
}

}  // namespace
}  // namespace dflash::kernels::cuda

TORCH_LIBRARY(dflash_emu, m) {
  m.def("anchor_block_attention_fwd(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor keep, int block_size, "
        "int window, float scale, Tensor? ctx_start=None) -> (Tensor, Tensor)");
  m.def("anchor_block_attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "Tensor anchors, Tensor keep, int block_size, int window, float scale, Tensor? ctx_start=None) "
        "-> (Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(dflash_emu, CPU, m) {
  m.impl("anchor_block_attention_fwd", &dflash::kernels::cuda::emu_fwd);
  m.impl("anchor_block_attention_bwd", &dflash::kernels::cuda::emu_bwd);
}
