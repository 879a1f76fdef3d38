// The CUDA anchor-attention kernels run on the CPU under cuda_emu.h, exposed to Python as
//   torch.ops.dflash_emu.anchor_block_attention_fwd(q, k, v, anchors, keep, block_size, window, scale,
//                                                   ctx_start=None, smem_limit=232448)
//   torch.ops.dflash_emu.anchor_block_attention_bwd(dout, q, k, v, out, lse, anchors, keep, block_size,
//                                                   window, scale, ctx_start=None, smem_limit=232448,
//                                                   deterministic=False, workspace_bytes=2**30)
//   torch.ops.dflash_emu.tile_choice(kernel, head_dim, smem_limit) -> [keys, stages, dynamic, static] or []
// for CPU tensors (bf16 or fp16), so tests/python/test_attention_cuda_emulated.py can check the GPU
// code's index math, masking, tile configurations and synchronisation on a machine without a GPU. The
// launches are the CUDA build's own (anchor_attention_cuda_launch.cuh): the tile configuration chosen for
// `smem_limit` bytes of shared memory per block, the backward's chunks for `workspace_bytes`, the
// deterministic dQ kernel. mma.sync is emulated from the PTX ISA's fragment layout (written here
// independently of the kernels' fragment loads).
//
// Every buffer the kernels touch sits between canary regions (NaN bit patterns), in the layout the caller
// gave (strides included): reading past a tensor or into a gap poisons the result, and a write past one is
// reported.
#include "cuda_emu.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "anchor_attention_checks.h"
#include "anchor_attention_cuda_launch.cuh"

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

// A tensor of `sizes` (with `strides`, or contiguous) inside a larger buffer whose margins hold a canary bit
// pattern; check() reports any write into the margins.
struct Guarded {
  at::Tensor buf, view, canary;
  Guarded(at::IntArrayRef sizes, at::TensorOptions opt, double fill, at::IntArrayRef strides = {}) {
    std::vector<int64_t> st(strides.begin(), strides.end());
    if (st.empty()) {  // contiguous
      st.assign(sizes.size(), 1);
      for (size_t d = sizes.size(); d-- > 1;) st[d - 1] = st[d] * std::max<int64_t>(sizes[d], 1);
    }
    int64_t extent = 1;
    for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * st[d];
    for (int64_t s : sizes) extent = s == 0 ? 0 : extent;
    buf = at::empty({extent + 2 * kCanary}, opt);
    buf.view(at::kByte).fill_(255);  // all-ones bytes: NaN for every floating type, -1 for integers
    canary = buf.clone();
    view = buf.as_strided(sizes, st, kCanary);
    view.fill_(fill);
  }
  // A copy in t's own layout when it has one without overlaps (size-1 dimensions keep their strides).
  static Guarded copy_of(const at::Tensor& t) {
    Guarded g(t.sizes(), t.options(), 0, t.is_non_overlapping_and_dense() ? t.strides() : at::IntArrayRef{});
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

StridedOut strided_out(const at::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

// Runs each launch of anchor_attention_cuda_launch.cuh on the emulator, with exactly the dynamic shared memory
// the configuration asks for.
struct EmuLauncher {
  template <typename A>
  bool launch(void (*kernel)(A), dim3 grid, unsigned threads, int64_t smem, const A& args) {
    TORCH_CHECK(kernel != nullptr, "cuda_emu: a tile configuration without a kernel instantiation");
    cuda_emu::launch(grid, threads, size_t(smem), [&] { kernel(args); });
    return true;
  }
  bool zero(void* ptr, int64_t bytes) {
    std::memset(ptr, 0, size_t(bytes));
    return true;
  }
};

TileKernel tile_kernel_of(const std::string& name) {
  if (name == "forward") return TileKernel::Forward;
  if (name == "backward") return TileKernel::Backward;
  TORCH_CHECK(name == "dq", "dflash_emu: kernel must be forward, backward or dq, got ", name);
  return TileKernel::DqRows;
}

// The configuration a GPU with `smem_limit` bytes per block gets (the static part as the structs count it).
const TileConfig& emu_tile(TileKernel k, int64_t head_dim, int64_t smem_limit) {
  const StaticSmem estimate = [](const TileConfig& c) { return tile_static_smem_estimate(c.kernel); };
  const TileConfig* c = choose_tile_config(k, int(head_dim), smem_limit, estimate);
  TORCH_CHECK(c, "dflash_emu: ", no_tile_fits(k, int(head_dim), smem_limit, estimate, "the emulated GPU"));
  return *c;
}

std::vector<int64_t> emu_tile_choice(const std::string& kernel, int64_t head_dim, int64_t smem_limit) {
  const StaticSmem estimate = [](const TileConfig& c) { return tile_static_smem_estimate(c.kernel); };
  const TileConfig* c = choose_tile_config(tile_kernel_of(kernel), int(head_dim), smem_limit, estimate);
  if (!c) return {};
  return {c->keys, c->stages, tile_dynamic_smem(*c), estimate(*c)};
}

struct EmuPlan {
  Guarded order, sorted_anchor, nkept, status;
  AnchorAttentionCudaPlan view(bool with_status) const {
    return {order.view.data_ptr<int32_t>(), sorted_anchor.view.data_ptr<int32_t>(), nkept.view.data_ptr<int32_t>(),
            with_status ? reinterpret_cast<uint64_t*>(status.view.data_ptr<int64_t>()) : nullptr};
  }
};

// The plan kernel; with check_range its range check of anchors / ctx_start raises the message the CUDA op
// raises (there one call later, here at once).
EmuPlan run_plan(const AnchorAttentionArgs& a, bool check_range, bool anchors_batched, bool ctx_start_batched) {
  const auto& s = a.shape;
  const auto iopt = at::TensorOptions().dtype(at::kInt);
  EmuPlan p{Guarded({s.batch * s.num_blocks}, iopt, -7), Guarded({s.batch * s.num_blocks}, iopt, -7),
            Guarded({s.batch}, iopt, -7), Guarded({kAnchorStatusWords}, iopt.dtype(at::kLong), 0)};
  EmuLauncher l;
  launch_plan(l, a, p.view(check_range));
  p.order.check("order");
  p.sorted_anchor.check("sorted_anchor");
  p.nkept.check("nkept");
  p.status.check("status");
  uint64_t status[kAnchorStatusWords];
  std::memcpy(status, p.status.view.data_ptr<int64_t>(), sizeof(status));
  const std::string bad = describe_anchor_status(status, s, anchors_batched, ctx_start_batched);
  TORCH_CHECK(bad.empty(), "anchor_block_attention (CUDA emulation): ", bad);
  return p;
}

template <typename F>
void dispatch(const at::Tensor& q, F&& f) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf, "dflash_emu: bf16 or fp16 only");
  if (q.scalar_type() == at::kBFloat16)
    f(EmuBf16{});
  else
    f(EmuF16{});
}

void check_emulated(const kernels::AnchorAttentionArgs& args, bool backward) {
  const char* why = anchor_attention_cuda_unsupported(args.shape);
  TORCH_CHECK(why == nullptr, "dflash_emu: ", why ? why : "");
  TORCH_CHECK(operands_aligned16(args, backward), "dflash_emu: the launcher finds q, k, v or dout misaligned");
}

std::tuple<at::Tensor, at::Tensor> emu_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                           const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                           int64_t window, double scale, const std::optional<at::Tensor>& cs_opt,
                                           int64_t smem_limit) {
  const at::Tensor cs = ops::ctx_start_or_undefined(cs_opt);
  const ops::AttentionDims d = ops::check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, cs);
  const Guarded q = Guarded::copy_of(ops::cuda_aligned_rows(q_in)), k = Guarded::copy_of(ops::cuda_aligned_rows(k_in)),
                v = Guarded::copy_of(ops::cuda_aligned_rows(v_in));
  auto args = ops::make_kernel_args(d, q.view, k.view, v.view, anchors, keep, window, scale, cs);
  check_emulated(args, false);
  const TileConfig& fwd = emu_tile(TileKernel::Forward, d.head_dim, smem_limit);
  Guarded out(q_in.sizes(), q_in.options(), 0);
  Guarded lse({d.batch, d.q_heads, d.num_blocks * d.block_size}, q_in.options().dtype(at::kFloat),
              -std::numeric_limits<double>::infinity());
  args.out = strided_out(out.view);
  args.lse = lse.view.data_ptr();
  const EmuPlan plan = run_plan(args, true, anchors.dim() == 2, cs.defined() && cs.dim() == 2);
  EmuLauncher l;
  dispatch(q_in, [&](auto t) { launch_forward<decltype(t)>(l, args, plan.view(false), fwd); });
  out.check("out");
  lse.check("lse");
  return {out.view, lse.view};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> emu_bwd(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                       const at::Tensor& k_in, const at::Tensor& v_in,
                                                       const at::Tensor& out_in, const at::Tensor& lse_in,
                                                       const at::Tensor& anchors, const at::Tensor& keep,
                                                       int64_t block_size, int64_t window, double scale,
                                                       const std::optional<at::Tensor>& cs_opt, int64_t smem_limit,
                                                       bool deterministic, int64_t workspace_bytes) {
  const at::Tensor cs = ops::ctx_start_or_undefined(cs_opt);
  const ops::AttentionDims d = ops::check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, cs);
  const Guarded q = Guarded::copy_of(ops::cuda_aligned_rows(q_in)), k = Guarded::copy_of(ops::cuda_aligned_rows(k_in)),
                v = Guarded::copy_of(ops::cuda_aligned_rows(v_in));
  const Guarded dout = Guarded::copy_of(ops::cuda_aligned_rows(dout_in.to(q_in.scalar_type())));
  const Guarded o = Guarded::copy_of(out_in), lse = Guarded::copy_of(lse_in.to(at::kFloat));
  auto args = ops::make_kernel_args(d, q.view, k.view, v.view, anchors, keep, window, scale, cs);
  check_emulated(args, true);
  BackwardPlan w;
  w.bwd = &emu_tile(TileKernel::Backward, d.head_dim, smem_limit);
  w.dq = deterministic ? &emu_tile(TileKernel::DqRows, d.head_dim, smem_limit) : nullptr;
  w.chunks = plan_bwd_chunks(args.shape, deterministic, workspace_bytes);
  Guarded dq(q_in.sizes(), q_in.options(), 0), dk(k_in.sizes(), k_in.options(), 0), dv(v_in.sizes(), v_in.options(), 0);
  const auto fopt = q_in.options().dtype(at::kFloat);
  Guarded delta({w.chunks.delta_floats}, fopt, 0), dq_acc({w.chunks.dq_acc_floats}, fopt, 0);
  w.delta = delta.view.data_ptr<float>();
  w.dq_acc = dq_acc.view.data_ptr<float>();
  args.out = strided_out(o.view);
  args.lse = lse.view.data_ptr();
  args.dout = {dout.view.data_ptr(), dout.view.stride(0), dout.view.stride(1), dout.view.stride(2)};
  args.dq = strided_out(dq.view);
  args.dk = strided_out(dk.view);
  args.dv = strided_out(dv.view);
  const EmuPlan plan = run_plan(args, false, false, false);
  EmuLauncher l;
  dispatch(q_in, [&](auto t) { launch_backward<decltype(t)>(l, args, plan.view(false), w); });
  for (const auto* g : {&dq, &dk, &dv, &delta, &dq_acc}) g->check("a gradient or workspace buffer");
  return {dq.view, dk.view, dv.view};
}

}  // namespace
}  // namespace dflash::kernels::cuda

TORCH_LIBRARY(dflash_emu, m) {
  m.def("anchor_block_attention_fwd(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor keep, int block_size, "
        "int window, float scale, Tensor? ctx_start=None, int smem_limit=232448) -> (Tensor, Tensor)");
  m.def("anchor_block_attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "Tensor anchors, Tensor keep, int block_size, int window, float scale, Tensor? ctx_start=None, "
        "int smem_limit=232448, bool deterministic=False, int workspace_bytes=1073741824) -> (Tensor, Tensor, Tensor)");
  m.def("tile_choice(str kernel, int head_dim, int smem_limit) -> int[]", &dflash::kernels::cuda::emu_tile_choice);
}
TORCH_LIBRARY_IMPL(dflash_emu, CPU, m) {
  m.impl("anchor_block_attention_fwd", &dflash::kernels::cuda::emu_fwd);
  m.impl("anchor_block_attention_bwd", &dflash::kernels::cuda::emu_bwd);
}
