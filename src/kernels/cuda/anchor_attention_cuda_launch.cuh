// Host side of the anchor-block attention's launches, shared by the CUDA build (anchor_attention_cuda.cu) and
// the CPU emulation (tests/ops/cuda_emu), so the emulation runs the very sequence of launches a GPU gets: which
// kernel instantiation a tile configuration names, the plan, the forward, and the backward chunk by chunk.
//
// A launcher L provides
//   template <typename A> bool launch(void (*kernel)(A), dim3 grid, unsigned threads, int64_t smem, const A& args);
//   bool zero(void* ptr, int64_t bytes);
// (false: it failed; the launcher keeps the reason).
#pragma once
#include <algorithm>

#include "anchor_attention_cuda_host.h"
#include "anchor_attention_cuda_kernels.cuh"

namespace dflash::kernels::cuda {
namespace {

using Kernel = void (*)(Params);

constexpr int tile_key(TileKernel k, int head_dim, int keys, int stages) {
  return int(k) * 1000000 + head_dim * 1000 + keys * 10 + stages;
}

// The instantiation of configuration c for element type T; nullptr for a configuration that is not compiled
// (never for those tile_configs() lists: the emulation tests run each of them).
template <typename T>
Kernel kernel_for(const TileConfig& c) {
  using K = TileKernel;
  switch (tile_key(c.kernel, c.head_dim, c.keys, c.stages)) {
    case tile_key(K::Forward, 64, 64, 2): return fwd_kernel<T, 64, 64, 2>;
    case tile_key(K::Forward, 128, 64, 2): return fwd_kernel<T, 128, 64, 2>;
    case tile_key(K::Forward, 256, 32, 2): return fwd_kernel<T, 256, 32, 2>;
    case tile_key(K::Forward, 256, 32, 1): return fwd_kernel<T, 256, 32, 1>;
    case tile_key(K::Backward, 64, 128, 1): return bwd_kernel<T, 64, 128>;
    case tile_key(K::Backward, 128, 128, 1): return bwd_kernel<T, 128, 128>;
    case tile_key(K::Backward, 128, 64, 1): return bwd_kernel<T, 128, 64>;
    case tile_key(K::Backward, 256, 64, 1): return bwd_kernel<T, 256, 64>;
    case tile_key(K::Backward, 256, 16, 1): return bwd_kernel<T, 256, 16>;
    case tile_key(K::DqRows, 64, 64, 2): return dq_kernel<T, 64, 64, 2>;
    case tile_key(K::DqRows, 128, 64, 2): return dq_kernel<T, 128, 64, 2>;
    case tile_key(K::DqRows, 128, 32, 2): return dq_kernel<T, 128, 32, 2>;
    case tile_key(K::DqRows, 256, 32, 2): return dq_kernel<T, 256, 32, 2>;
    case tile_key(K::DqRows, 256, 16, 1): return dq_kernel<T, 256, 16, 1>;
  }
  return nullptr;
}

inline Str str_of(const Strided& x) { return {x.sb, x.st, x.sh}; }
inline Str str_of(const StridedOut& x) { return {x.sb, x.st, x.sh}; }

// Kernel parameters from the framework-free arguments and the plan buffers; the launch covers every batch
// and KV head until launch_backward narrows it to a chunk.
inline Params make_params(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl) {
  const AnchorAttentionShape& s = a.shape;
  Params p{};
  p.q = static_cast<const uint16_t*>(a.q.data);
  p.k = static_cast<const uint16_t*>(a.k.data);
  p.v = static_cast<const uint16_t*>(a.v.data);
  p.o = static_cast<const uint16_t*>(a.out.data);
  p.dout = static_cast<const uint16_t*>(a.dout.data);
  p.qs = str_of(a.q);
  p.ks = str_of(a.k);
  p.vs = str_of(a.v);
  p.os = str_of(a.out);
  p.dos = str_of(a.dout);
  p.out = static_cast<uint16_t*>(a.out.data);
  p.outs = str_of(a.out);
  p.dq = static_cast<uint16_t*>(a.dq.data);
  p.dqs = str_of(a.dq);
  p.dk = static_cast<uint16_t*>(a.dk.data);
  p.dks = str_of(a.dk);
  p.dv = static_cast<uint16_t*>(a.dv.data);
  p.dvs = str_of(a.dv);
  p.lse = static_cast<float*>(a.lse);
  p.order = pl.order;
  p.sorted_anchor = pl.sorted_anchor;
  p.nkept = pl.nkept;
  p.ctx_start = a.ctx_start;
  p.ctx_start_sb = a.ctx_start_sb;
  p.N = int(s.num_blocks);
  p.B = int(s.block_size);
  p.S = int(s.context_len);
  p.Hq = int(s.q_heads);
  p.Hkv = int(s.kv_heads);
  p.G = int(s.q_heads / s.kv_heads);
  p.Tq = int(s.num_blocks * s.block_size);
  p.D = int(s.head_dim);
  p.b0 = 0;
  p.nb_c = int(s.batch);
  p.h0 = 0;
  p.hkv_c = int(s.kv_heads);
  p.window = s.window;
  p.scale = float(s.scale);
  p.scale_log2 = float(s.scale * 1.4426950408889634);
  return p;
}

// Per batch, the kept blocks sorted by anchor (and, when pl.status is set, the range check of anchors and
// ctx_start).
template <typename L>
bool launch_plan(L& l, const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl) {
  const AnchorAttentionShape& s = a.shape;
  if (s.batch == 0 || s.num_blocks == 0) return true;
  const PlanParams pp{a.anchors, a.anchors_sb, a.keep, a.keep_sb, a.ctx_start, a.ctx_start_sb,
                      int(s.num_blocks), int(s.context_len), pl.order, pl.sorted_anchor, pl.nkept,
                      reinterpret_cast<unsigned long long*>(pl.status)};
  const dim3 grid(unsigned((s.num_blocks + kPlanThreads - 1) / kPlanThreads), unsigned(s.batch));
  return l.launch(plan_kernel, grid, kPlanThreads, 0, pp);
}

template <typename T, typename L>
bool launch_forward(L& l, const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl, const TileConfig& fwd) {
  const AnchorAttentionShape& s = a.shape;
  if (s.batch == 0 || s.num_blocks == 0 || s.q_heads == 0) return true;
  const Params p = make_params(a, pl);
  const dim3 grid(unsigned(fwd_row_tiles(p)), unsigned(s.kv_heads), unsigned(s.batch));
  return l.launch(kernel_for<T>(fwd), grid, kFwdThreads, tile_dynamic_smem(fwd), p);
}

// Chunk by chunk (BackwardPlan::chunks): delta, then dK / dV (plus dQ by atomics into the zeroed accumulator and
// its conversion), or in the deterministic mode dK / dV and then dQ per row tile.
template <typename T, typename L>
bool launch_backward(L& l, const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl, const BackwardPlan& w) {
  const AnchorAttentionShape& s = a.shape;
  if (s.batch == 0 || s.num_blocks == 0 || s.q_heads == 0) return true;
  Params p = make_params(a, pl);
  p.delta = w.delta;
  p.dq_acc = w.dq ? nullptr : w.dq_acc;
  for (int64_t b0 = 0; b0 < s.batch; b0 += w.chunks.batches)
    for (int64_t h0 = 0; h0 < s.kv_heads; h0 += w.chunks.kv_heads) {
      p.b0 = int(b0);
      p.nb_c = int(std::min(w.chunks.batches, s.batch - b0));
      p.h0 = int(h0);
      p.hkv_c = int(std::min(w.chunks.kv_heads, s.kv_heads - h0));
      const int64_t rows = chunk_rows(p);
      const unsigned gy = unsigned(p.hkv_c), gz = unsigned(p.nb_c);  // grids cover the chunk's heads and batches
      if (!l.launch(delta_kernel<T>, dim3(unsigned((rows + kDeltaWarps - 1) / kDeltaWarps)), kDeltaWarps * 32, 0, p))
        return false;
      if (p.dq_acc && !l.zero(p.dq_acc, rows * s.head_dim * int64_t(sizeof(float)))) return false;
      if (!l.launch(kernel_for<T>(*w.bwd), dim3(unsigned(bwd_items(p, w.bwd->keys)), gy, gz),
                    kBwdThreads, tile_dynamic_smem(*w.bwd), p))
        return false;
      if (w.dq) {
        if (!l.launch(kernel_for<T>(*w.dq), dim3(unsigned(fwd_row_tiles(p)), gy, gz),
                      kFwdThreads, tile_dynamic_smem(*w.dq), p))
          return false;
      } else {
        const int64_t blocks = std::min<int64_t>((rows * s.head_dim + kConvertThreads - 1) / kConvertThreads, 65536);
        if (!l.launch(dq_convert_kernel<T>, dim3(unsigned(blocks)), kConvertThreads, 0, p)) return false;
      }
    }
  return true;
}

}  // namespace
}  // namespace dflash::kernels::cuda
