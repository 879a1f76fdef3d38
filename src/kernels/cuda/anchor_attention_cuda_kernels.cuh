// Device code of the anchor-block attention, shared by the CUDA build (anchor_attention_cuda.cu)
// and a CPU emulation of the GPU execution model used in tests (tests/ops/cuda_emu). The
// includer provides Elem<T> (tensor-core mma, float <-> 16-bit) for its element types;
// anchor_attention_cuda_launch.cuh launches the kernels.
//
// Tensor-core fragments (PTX ISA, mma.m16n8k16 with 16-bit inputs), lane = 4*gid + tq:
//   A 16x16 (row):  a0 = A[gid][2tq..+1], a1 = A[gid+8][2tq..+1], a2 = A[gid][2tq+8..+9], a3 = A[gid+8][2tq+8..+9]
//   B 16x8  (col):  b0 = B[2tq..+1][gid], b1 = B[2tq+8..+9][gid]
//   C 16x8  (f32):  c0,c1 = C[gid][2tq..+1], c2,c3 = C[gid+8][2tq..+1]
// The lower-indexed element of a pair sits in the low 16 bits. Fragments come from shared memory
// through ldmatrix (frag_* below); the C fragment of S = QK^T is reused in registers as the A
// fragment of P for P V (FlashAttention-2), and likewise dS for dQ = dS K.
//
// Tile sizes are template parameters; anchor_attention_cuda_host.h lists the configurations compiled
// in and chooses one per launch from the device's shared memory.
#pragma once
#include <climits>
#include <cstdint>

#include "anchor_attention.h"
#include "anchor_attention_cuda_host.h"
#include "anchor_mask.h"

// Dynamic shared memory; the emulation replaces this with a per-launch buffer.
#ifndef DFLASH_DYN_SMEM
#define DFLASH_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace dflash::kernels::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFull = 0xffffffffu;

struct Str {
  int64_t sb, st, sh;
};

struct Params {
  const uint16_t *q, *k, *v, *o, *dout;
  Str qs, ks, vs, os, dos;
  uint16_t *out, *dq, *dk, *dv;
  Str outs, dqs, dks, dvs;
  float* lse;     // [batch, Hq, N*B]
  float* delta;   // workspace of the launch's chunk: [nb_c, hkv_c * G, N*B] (ws_row)
  float* dq_acc;  // ... and [nb_c, hkv_c * G, N*B, D]; null: dQ comes from dq_kernel (deterministic)
  const int32_t *order, *sorted_anchor, *nkept;
  const int64_t* ctx_start;  // [batch, N] per block (null: 0); read through ctx_start_of
  int64_t ctx_start_sb;
  int N, B, S, Hq, Hkv, G, Tq, D;
  int b0, nb_c, h0, hkv_c;  // a launch covers batches [b0, b0 + nb_c) x KV heads [h0, h0 + hkv_c)
  int64_t window;
  float scale, scale_log2;
};

// Tensor-core multiply-accumulate and conversions for element type T (bf16 or fp16).
template <typename T>
struct Elem;

// ---- fragment loads from shared memory (ld = row stride in elements, a multiple of 8) -------------
// ldmatrix .x4 loads four 8x8 16-bit matrices; lanes 8i..8i+7 give the addresses of the 8 rows of
// matrix i (16-byte aligned). Lane l receives r[i] = M_i[l/4][2(l%4)..+1], or with .trans
// r[i] = (M_i[2(l%4)][l/4], M_i[2(l%4)+1][l/4]). The emulation (tests/ops/cuda_emu) defines
// ldsm_x4 / ldsm_x4_t itself.
#if defined(__CUDACC__)
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const uint16_t* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
#endif

// A fragment of A[m][k] = s[m * ld + k] (row-major) at (m0, k0): matrices (m0, k0), (m0+8, k0),
// (m0, k0+8), (m0+8, k0+8) are a0..a3.
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const uint16_t* s, int ld, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4(a, s + (m0 + (i & 1) * 8 + r) * ld + k0 + (i >> 1) * 8);
}
// A fragment of A[m][k] = s[k * ld + m] (stored transposed) at (m0, k0): transposed matrices at
// stored (row k0, col m0), (k0, m0+8), (k0+8, m0), (k0+8, m0+8) are a0..a3.
__device__ __forceinline__ void frag_a_t(uint32_t (&a)[4], const uint16_t* s, int ld, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4_t(a, s + (k0 + (i >> 1) * 8 + r) * ld + m0 + (i & 1) * 8);
}
// B fragments (b[t][0..1]) of the two n-tiles n0 + 8t of B[k][n] = s[n * ld + k] (K stored
// [key][d], used as K^T) at k0: matrices (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8).
__device__ __forceinline__ void frag_b2_nmajor(uint32_t (&b)[2][2], const uint16_t* s, int ld, int k0, int n0,
                                               int lane) {
  const int i = lane >> 3, r = lane & 7;
  uint32_t x[4];
  ldsm_x4(x, s + (n0 + (i >> 1) * 8 + r) * ld + k0 + (i & 1) * 8);
  b[0][0] = x[0];
  b[0][1] = x[1];
  b[1][0] = x[2];
  b[1][1] = x[3];
}
// B fragments of the two n-tiles n0 + 8t of B[k][n] = s[k * ld + n] (V stored [key][d]) at k0:
// transposed matrices at stored (k0, n0), (k0+8, n0), (k0, n0+8), (k0+8, n0+8).
__device__ __forceinline__ void frag_b2_kmajor(uint32_t (&b)[2][2], const uint16_t* s, int ld, int k0, int n0,
                                               int lane) {
  const int i = lane >> 3, r = lane & 7;
  uint32_t x[4];
  ldsm_x4_t(x, s + (k0 + (i & 1) * 8 + r) * ld + n0 + (i >> 1) * 8);
  b[0][0] = x[0];
  b[0][1] = x[1];
  b[1][0] = x[2];
  b[1][1] = x[3];
}

// cp.async (sm_80+): 16-byte global -> shared copies that complete at cp_async_wait<N>() (all but
// the N most recently committed groups); valid = false writes zeros instead. The emulation defers
// every copy to that wait, so a missing wait or barrier shows up there.
#if defined(__CUDACC__)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// load_rows with cp.async (the caller commits and waits). ROLLED keeps the loop rolled: unrolled, its
// address arithmetic pushed the deterministic dQ kernel at D = 256 past 255 registers on sm_8x (ptxas
// spills), while the forward kernels spill there when it is rolled.
template <int D, int LD, int NT, bool ROLLED = false, typename Off>
__device__ __forceinline__ void load_rows_async(uint16_t* s, const uint16_t* g, int rows, Off off) {
  constexpr int kChunks = D / 8;
  auto copy = [&](int idx) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t o = off(r);
    cp_async16(s + r * LD + c * 8, o >= 0 ? g + o + c * 8 : g, o >= 0);
  };
  if constexpr (ROLLED) {
#pragma unroll 1
    for (int idx = threadIdx.x; idx < rows * kChunks; idx += NT) copy(idx);
  } else {
    for (int idx = threadIdx.x; idx < rows * kChunks; idx += NT) copy(idx);
  }
}

// Copies `rows` rows of D 16-bit elements into shared memory (row stride LD) in 16-byte pieces;
// off(r) gives row r's element offset from g, or a negative value for a row to zero-fill.
template <int D, int LD, int NT, typename Off>
__device__ __forceinline__ void load_rows(uint16_t* s, const uint16_t* g, int rows, Off off) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += NT) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t o = off(r);
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (o >= 0) val = *reinterpret_cast<const uint4*>(g + o + c * 8);
    *reinterpret_cast<uint4*>(s + r * LD + c * 8) = val;
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFull, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFull, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFull, x, 1);
  return x + __shfl_xor_sync(kFull, x, 2);
}

// Block n's context start, clamped to [0, S] like the anchors (0 when the caller passed none).
__device__ __forceinline__ int ctx_start_of(const Params& p, int b, int n) {
  if (!p.ctx_start) return 0;
  const int64_t x = p.ctx_start[int64_t(b) * p.ctx_start_sb + n];
  return int(x < 0 ? 0 : (x > p.S ? p.S : x));
}

// Row of the chunk's workspace (delta, dq_acc) that holds (batch b, q-head qh, token tok).
__device__ __forceinline__ int64_t ws_row(const Params& p, int b, int qh, int tok) {
  return (int64_t(b - p.b0) * p.hkv_c * p.G + (qh - p.h0 * p.G)) * p.Tq + tok;
}

// ---- plan ----------------------------------------------------------------------------------------
struct PlanParams {
  const int64_t* anchors;
  int64_t anchors_sb;
  const bool* keep;
  int64_t keep_sb;
  const int64_t* ctx_start;  // may be null
  int64_t ctx_start_sb;
  int N, S;
  int32_t *order, *sorted_anchor, *nkept;
  unsigned long long* status;  // null, or kAnchorStatusWords zeroed words: the range check (host.h)
};

// Counts an entry outside [0, S] and keeps the lowest such index (as the largest ~index, so that zero means
// none and the caller only zero-fills).
__device__ __forceinline__ void note_outside(unsigned long long* st, int64_t x, int S, int64_t index) {
  if (x >= 0 && x <= S) return;
  atomicAdd(st, 1ull);
  atomicMax(st + 1, ~static_cast<unsigned long long>(index));
}

// Rank of kept block i among the kept blocks of its batch by (anchor, index): a stable counting sort,
// O(N^2 / threads), microseconds for the N of a training step and deterministic. With `status`, also checks
// anchors and ctx_start of every block against [0, S] (the kernels clamp them, so memory stays safe).
__global__ void plan_kernel(const PlanParams pp) {
  const int b = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int N = pp.N, S = pp.S;
  const int64_t* an = pp.anchors + b * pp.anchors_sb;
  const bool* kp = pp.keep + b * pp.keep_sb;
  if (pp.status && i < N) {  // a [N] tensor (stride 0) is checked once, as batch 0
    if (b == 0 || pp.anchors_sb != 0) note_outside(pp.status, an[i], S, int64_t(b) * N + i);
    if (pp.ctx_start && (b == 0 || pp.ctx_start_sb != 0))
      note_outside(pp.status + 2, pp.ctx_start[b * pp.ctx_start_sb + i], S, int64_t(b) * N + i);
  }
  auto clamped = [&](int j) {
    const int64_t x = an[j];
    return int(x < 0 ? 0 : (x > S ? S : x));
  };
  if (i == 0) {
    int count = 0;
    for (int j = 0; j < N; ++j) count += kp[j] ? 1 : 0;
    pp.nkept[b] = count;
  }
  if (i >= N || !kp[i]) return;
  const int ai = clamped(i);
  int rank = 0;
  for (int j = 0; j < N; ++j) {
    if (!kp[j]) continue;
    const int aj = clamped(j);
    rank += (aj < ai || (aj == ai && j < i)) ? 1 : 0;
  }
  pp.order[int64_t(b) * N + rank] = i;
  pp.sorted_anchor[int64_t(b) * N + rank] = ai;
}

// ---- row tiles (forward and deterministic dQ) ----------------------------------------------------
// The rows of one (batch, KV head) are numbered in sorted block order: row R = i*G*B + g*B + j is slot j
// of q-head h*G+g of the i-th kept block. Fills rs for rows [R0, R0 + kBM): each kept row's context
// range, own-block bound, block, token and q-head, and the union [t_min, t_max) of the context ranges.
// The caller synchronises before reading rs.
__device__ __forceinline__ void row_tile_setup(const Params& p, int b, int h, int64_t R0, int64_t total,
                                               FwdRowsShared& rs) {
  const int tid = threadIdx.x;
  const int GB = p.G * p.B;
  if (tid == 0) {
    rs.t_min = INT_MAX;
    rs.t_max = INT_MIN;
  }
  __syncthreads();
  if (tid < kBM) {
    const int64_t R = R0 + tid;
    if (R < total) {
      const int32_t* order = p.order + int64_t(b) * p.N;
      const int bi = int(R / GB), rem = int(R % GB), g = rem / p.B, j = rem % p.B;
      const RowRanges rr = row_ranges(p.sorted_anchor[int64_t(b) * p.N + bi], j, p.B, p.window,
                                      ctx_start_of(p, b, order[bi]));
      const int lo = int(rr.ctx_lo), hi = int(rr.ctx_hi);
      rs.lo[tid] = lo;
      rs.hi[tid] = hi;
      rs.bhi[tid] = int(rr.blk_hi);
      rs.bi[tid] = bi;
      rs.tok[tid] = order[bi] * p.B + j;
      rs.qh[tid] = h * p.G + g;
      if (hi > lo) {
        atomicMin(&rs.t_min, lo);
        atomicMax(&rs.t_max, hi);
      }
    } else {
      rs.lo[tid] = rs.hi[tid] = rs.bhi[tid] = 0;
      rs.bi[tid] = -1;
      rs.tok[tid] = -1;
      rs.qh[tid] = 0;
    }
  }
}

// Runs tile(kc, vc, clo_a, chi_a, clo_b, chi_b) over the key tiles a row tile needs, with the tile's keys in
// shared memory (kc, vc) and the visible columns [clo, chi) of the thread's rows a (warp*16 + lane/4) and
// b (a + 8): first the context tiles of BN keys over the union [t_min, t_max) of the rows' ranges (none
// when empty), then each block's own B keys in tiles of BN, for that block's rows only. Keys load with
// cp.async into STAGES buffers (2: the next tile loads during this one); `first` issues the row tile's
// own loads (Q, dO), which travel in the first tile's group. ROLLED: see load_rows_async.
template <int D, int BN, int STAGES, int NT, bool ROLLED, typename First, typename Tile>
__device__ __forceinline__ void for_each_key_tile(const Params& p, int b, int h, const FwdRowsShared& rs, int64_t R0,
                                                  int64_t total, uint16_t* sK, uint16_t* sV, First&& first,
                                                  Tile&& tile) {
  constexpr int LD = D + kPad;
  const int GB = p.G * p.B;
  const int lane = threadIdx.x & 31, ra = (threadIdx.x >> 5) * 16 + (lane >> 2), rb = ra + 8;
  const int lo_a = rs.lo[ra], hi_a = rs.hi[ra], lo_b = rs.lo[rb], hi_b = rs.hi[rb];
  const int bi_a = rs.bi[ra], bi_b = rs.bi[rb], bhi_a = rs.bhi[ra], bhi_b = rs.bhi[rb];
  const int32_t* order = p.order + int64_t(b) * p.N;
  const int kmin = rs.t_min, kmax = rs.t_max;
  const int n_ctx = kmax > kmin ? (kmax - kmin + BN - 1) / BN : 0;
  const int chunks = (p.B + BN - 1) / BN;
  const int64_t last_row = (R0 + kBM < total ? R0 + kBM : total) - 1;
  const int bi_first = int(R0 / GB), bi_last = int(last_row / GB);
  const int n_steps = n_ctx + (bi_last - bi_first + 1) * chunks;
  const int64_t kb = int64_t(b) * p.ks.sb + int64_t(h) * p.ks.sh;
  const int64_t vb = int64_t(b) * p.vs.sb + int64_t(h) * p.vs.sh;

  // Starts loading step st's keys into buffer st % STAGES and commits them as one group.
  auto issue = [&](int st) {
    uint16_t* kd = sK + (st % STAGES) * BN * LD;
    uint16_t* vd = sV + (st % STAGES) * BN * LD;
    int64_t key0;
    int count;
    if (st < n_ctx) {
      key0 = kmin + int64_t(st) * BN;
      count = min(BN, kmax - int(key0));
    } else {
      const int os = st - n_ctx, c0 = (os % chunks) * BN;
      key0 = int64_t(p.S) + int64_t(order[bi_first + os / chunks]) * p.B + c0;
      count = min(BN, p.B - c0);
    }
    load_rows_async<D, LD, NT, ROLLED>(kd, p.k, BN, [&](int r) -> int64_t {
      return r < count ? kb + (key0 + r) * p.ks.st : -1;
    });
    load_rows_async<D, LD, NT, ROLLED>(vd, p.v, BN, [&](int r) -> int64_t {
      return r < count ? vb + (key0 + r) * p.vs.st : -1;
    });
    cp_async_commit();
  };

  first();
  issue(0);
  for (int st = 0; st < n_steps; ++st) {
    if (STAGES > 1 && st + 1 < n_steps) {
      issue(st + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // step st's keys (and the row operands) are in shared memory for every warp
    const uint16_t* kc = sK + (st % STAGES) * BN * LD;
    const uint16_t* vc = sV + (st % STAGES) * BN * LD;
    if (st < n_ctx) {
      const int t0 = kmin + st * BN;
      tile(kc, vc, lo_a - t0, hi_a - t0, lo_b - t0, hi_b - t0);
    } else {
      const int os = st - n_ctx, bi = bi_first + os / chunks, c0 = (os % chunks) * BN;
      tile(kc, vc, bi_a == bi ? -c0 : 0, bi_a == bi ? bhi_a - c0 : 0, bi_b == bi ? -c0 : 0,
           bi_b == bi ? bhi_b - c0 : 0);
    }
    __syncthreads();  // buffer st % STAGES is free again
    if (STAGES == 1 && st + 1 < n_steps) issue(st + 1);
  }
}

// ---- tile products --------------------------------------------------------------------------------
// acc[16 x D] += X[16 x BN] M[BN x D] for one warp: X is held as the C fragments of a 16 x BN product (scores
// P, or dS), which are exactly the A fragments of this one (FlashAttention-2's register reuse); M is a key
// tile stored [key][d] in shared memory (V for O += P V, K for dQ += dS K).
template <typename T, int D, int BN, int LD>
__device__ __forceinline__ void mma_scores_by_keys(float (&acc)[D / 8][4], const float (&x)[BN / 8][4],
                                                   const uint16_t* sM, int lane) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t a[4];
    a[0] = Elem<T>::pack(x[2 * kk][0], x[2 * kk][1]);
    a[1] = Elem<T>::pack(x[2 * kk][2], x[2 * kk][3]);
    a[2] = Elem<T>::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    a[3] = Elem<T>::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2) {
      uint32_t bf[2][2];
      frag_b2_kmajor(bf, sM, LD, kk * 16, dt * 8, lane);
      Elem<T>::mma(acc[dt], a, bf[0][0], bf[0][1]);
      Elem<T>::mma(acc[dt + 1], a, bf[1][0], bf[1][1]);
    }
  }
}

// ---- forward -------------------------------------------------------------------------------------
// One warp's online-softmax step over a key tile of BN columns already in sK/sV. Column c is visible
// for the thread's row a (gid) iff clo_a <= c < chi_a, likewise row b (gid + 8).
template <typename T, int D, int BN, int LD>
__device__ __forceinline__ void fwd_tile(const uint16_t* sQ, const uint16_t* sK, const uint16_t* sV, int warp,
                                         int lane, int clo_a, int chi_a, int clo_b, int chi_b,
                                         float scale_log2, float (&o)[D / 8][4], float (&m)[2], float (&l)[2]) {
  const bool vis_a = max(clo_a, 0) < min(chi_a, BN), vis_b = max(clo_b, 0) < min(chi_b, BN);
  if (!__any_sync(kFull, vis_a || vis_b)) return;  // tile fully outside this warp's rows
  const bool full = __all_sync(kFull, clo_a <= 0 && chi_a >= BN && clo_b <= 0 && chi_b >= BN);
  const int tq = lane & 3;

  float s[BN / 8][4];
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    uint32_t a[4];
    frag_a(a, sQ, LD, warp * 16, kt * 16, lane);
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt += 2) {
      uint32_t bf[2][2];
      frag_b2_nmajor(bf, sK, LD, kt * 16, nt * 8, lane);
      Elem<T>::mma(s[nt], a, bf[0][0], bf[0][1]);
      Elem<T>::mma(s[nt + 1], a, bf[1][0], bf[1][1]);
    }
  }

  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = nt * 8 + 2 * tq + (e & 1);
      float x = s[nt][e] * scale_log2;
      if (!full) {
        const bool v = e < 2 ? (c >= clo_a && c < chi_a) : (c >= clo_b && c < chi_b);
        x = v ? x : -INFINITY;
      }
      s[nt][e] = x;
    }
    mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
  }
  mx_a = quad_max(mx_a);
  mx_b = quad_max(mx_b);
  const float mn_a = fmaxf(m[0], mx_a), mn_b = fmaxf(m[1], mx_b);
  // A row with nothing visible yet keeps m = -inf; use 0 as its reference so no -inf - -inf appears.
  const float ref_a = mn_a == -INFINITY ? 0.f : mn_a, ref_b = mn_b == -INFINITY ? 0.f : mn_b;
  const float alpha_a = exp2f(m[0] - ref_a), alpha_b = exp2f(m[1] - ref_b);
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - ref_a);
    s[nt][1] = exp2f(s[nt][1] - ref_a);
    s[nt][2] = exp2f(s[nt][2] - ref_b);
    s[nt][3] = exp2f(s[nt][3] - ref_b);
    sum_a += s[nt][0] + s[nt][1];
    sum_b += s[nt][2] + s[nt][3];
  }
  l[0] = l[0] * alpha_a + sum_a;  // per-thread partial sums; the quad is reduced at the end
  l[1] = l[1] * alpha_b + sum_b;
  m[0] = mn_a;
  m[1] = mn_b;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][0] *= alpha_a;
    o[dt][1] *= alpha_a;
    o[dt][2] *= alpha_b;
    o[dt][3] *= alpha_b;
  }
  // O += P V: the score fragments of the tile are the A fragments of P.
  mma_scores_by_keys<T, D, BN, LD>(o, s, sV, lane);
}


// One CTA per 64-row tile x KV head: online softmax over the tile's key steps; writes O and the LSE of kept
// rows only (the caller zero-fills out and fills lse with -inf).
template <typename T, int D, int BN, int STAGES>
__global__ void __launch_bounds__(kFwdThreads, 2) fwd_kernel(const Params p) {
  constexpr int LD = D + kPad;
  DFLASH_DYN_SMEM(smem_raw);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sK = sQ + kBM * LD;          // [STAGES][BN][LD]
  uint16_t* sV = sK + STAGES * BN * LD;  // [STAGES][BN][LD]
  __shared__ FwdRowsShared rs;

  const int b = p.b0 + blockIdx.z, h = p.h0 + blockIdx.y;
  const int64_t total = int64_t(p.nkept[b]) * p.G * p.B;
  const int64_t R0 = int64_t(blockIdx.x) * kBM;
  if (R0 >= total) return;  // the same for the whole CTA
  row_tile_setup(p, b, h, R0, total, rs);
  __syncthreads();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tq = lane & 3;
  const int ra = warp * 16 + gid, rb = ra + 8;
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  const int64_t qb = int64_t(b) * p.qs.sb;
  for_each_key_tile<D, BN, STAGES, kFwdThreads, false>(
      p, b, h, rs, R0, total, sK, sV,
      [&] {
        load_rows_async<D, LD, kFwdThreads>(sQ, p.q, kBM, [&](int r) -> int64_t {
          return rs.tok[r] < 0 ? -1 : qb + int64_t(rs.tok[r]) * p.qs.st + int64_t(rs.qh[r]) * p.qs.sh;
        });
      },
      [&](const uint16_t* kc, const uint16_t* vc, int clo_a, int chi_a, int clo_b, int chi_b) {
        fwd_tile<T, D, BN, LD>(sQ, kc, vc, warp, lane, clo_a, chi_a, clo_b, chi_b, p.scale_log2, o, m, l);
      });

  // Normalise and write O and the LSE (natural log) of the valid rows.
  const float la = quad_sum(l[0]), lb = quad_sum(l[1]);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half ? rb : ra;
    const int tok = rs.tok[r];
    if (tok < 0) continue;
    const int qh = rs.qh[r];
    const float lsum = half ? lb : la, mrow = half ? m[1] : m[0];
    const float inv = 1.f / lsum;
    uint16_t* dst = p.out + int64_t(b) * p.outs.sb + int64_t(tok) * p.outs.st + int64_t(qh) * p.outs.sh;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int c = dt * 8 + 2 * tq;
      *reinterpret_cast<uint32_t*>(dst + c) = Elem<T>::pack(o[dt][2 * half] * inv, o[dt][2 * half + 1] * inv);
    }
    if (tq == 0) p.lse[(int64_t(b) * p.Hq + qh) * p.Tq + tok] = (mrow + log2f(lsum)) * kLn2;
  }
}

// ---- backward ------------------------------------------------------------------------------------
// Rows of the launch's chunk, in workspace order: row -> (batch, q-head, token).
struct ChunkRow {
  int b, qh, tok;
};
__device__ __forceinline__ ChunkRow chunk_row(const Params& p, int64_t row) {
  const int hq_c = p.hkv_c * p.G;
  const int64_t bh = row / p.Tq;
  return {p.b0 + int(bh / hq_c), p.h0 * p.G + int(bh % hq_c), int(row % p.Tq)};
}
__host__ __device__ __forceinline__ int64_t chunk_rows(const Params& p) { return int64_t(p.nb_c) * p.hkv_c * p.G * p.Tq; }

// delta = sum_d dO * O per row of the chunk, one warp per row.
template <typename T>
__global__ void delta_kernel(const Params p) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= chunk_rows(p)) return;
  const ChunkRow c = chunk_row(p, row);
  const uint16_t* o = p.o + int64_t(c.b) * p.os.sb + int64_t(c.tok) * p.os.st + int64_t(c.qh) * p.os.sh;
  const uint16_t* g = p.dout + int64_t(c.b) * p.dos.sb + int64_t(c.tok) * p.dos.st + int64_t(c.qh) * p.dos.sh;
  float sum = 0.f;
  for (int d = lane; d < p.D; d += 32) sum += Elem<T>::to_float(o[d]) * Elem<T>::to_float(g[d]);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
  if (lane == 0) p.delta[row] = sum;
}

// dq[b, tok, qh, :] = dq_acc of the chunk's rows, in the output dtype.
template <typename T>
__global__ void dq_convert_kernel(const Params p) {
  const int64_t total = chunk_rows(p) * p.D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const ChunkRow c = chunk_row(p, i / p.D);
    const uint32_t two = Elem<T>::pack(p.dq_acc[i], 0.f);
    p.dq[int64_t(c.b) * p.dqs.sb + int64_t(c.tok) * p.dqs.st + int64_t(c.qh) * p.dqs.sh + i % p.D] =
        uint16_t(two & 0xffffu);
  }
}

// One CTA per key tile x KV head. Items [0, n_ctx) are context tiles of BN keys; the rest are the
// own keys of the i-th kept block (in chunks of BN when B is larger). Loops over exactly the row tiles
// that see its keys and owns their dK / dV (no atomics); dQ goes to dq_acc by fp32 atomics, or
// (deterministic) is left to dq_kernel.
template <typename T, int D, int BN>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_kernel(const Params p) {
  constexpr int LD = D + kPad, LDP = BN + kPad, DH = D / 2;
  // 8 warps: dK/dV split into KG groups of 16 keys x (8 / KG) slices of DW head dims; scores into
  // 4 row groups x 2 column groups of CW keys (NT1 n-tiles; a 16-key tile leaves the second group idle);
  // dQ into 4 row groups x 2 halves of DH dims.
  constexpr int KG = BN / 16, DW = D / (8 / KG), CW = BN / 2 >= 16 ? BN / 2 : 16, NT1 = CW / 8;
  static_assert(KG == 1 || KG == 2 || KG == 4 || KG == 8, "8 warps cover the key tile in 16-key groups");
  static_assert(DW % 16 == 0 && NT1 % 2 == 0, "fragments are loaded in pairs of n-tiles");
  DFLASH_DYN_SMEM(smem_raw);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sV = sK + BN * LD;
  uint16_t* sQ = sV + BN * LD;
  uint16_t* sdO = sQ + kBM * LD;
  uint16_t* sP = sdO + kBM * LD;
  uint16_t* sdS = sP + kBM * LDP;
  __shared__ BwdRowsShared rs;

  const int b = p.b0 + blockIdx.z, h = p.h0 + blockIdx.y;
  const int nk = p.nkept[b];
  const int GB = p.G * p.B;
  const int n_ctx = (p.S + BN - 1) / BN, chunks = (p.B + BN - 1) / BN;
  const int32_t* order = p.order + int64_t(b) * p.N;
  const int32_t* sanchor = p.sorted_anchor + int64_t(b) * p.N;

  // Keys [key0, key0 + kn) of this item and the sorted blocks [first, last) that see them.
  const int item = blockIdx.x;
  const bool own = item >= n_ctx;
  int64_t key0;
  int kn, first, last, c0 = 0;
  if (!own) {
    const int k0 = item * BN;
    key0 = k0;
    kn = min(BN, p.S - k0);
    int lo = 0, hi = nk;  // first block with anchor > k0
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (sanchor[mid] > k0) hi = mid; else lo = mid + 1;
    }
    first = lo;
    last = nk;
    if (p.window > 0) {  // and anchor - (window - 1) < k0 + kn, i.e. anchor < k0 + kn + window - 1
      const int64_t bound = int64_t(k0) + kn + p.window - 1;
      hi = nk;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (sanchor[mid] >= bound) hi = mid; else lo = mid + 1;
      }
      last = lo;
    }
  } else {
    const int o = item - n_ctx, bi = o / chunks;
    if (bi >= nk) return;
    c0 = (o % chunks) * BN;
    key0 = int64_t(p.S) + int64_t(order[bi]) * p.B + c0;
    kn = min(BN, p.B - c0);
    first = bi;
    last = bi + 1;
  }
  if (first >= last) return;  // nobody sees these keys: their gradients stay zero

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tq = lane & 3;
  const int64_t kb = int64_t(b) * p.ks.sb + int64_t(h) * p.ks.sh;
  const int64_t vb = int64_t(b) * p.vs.sb + int64_t(h) * p.vs.sh;
  load_rows<D, LD, kBwdThreads>(sK, p.k, BN, [&](int r) -> int64_t { return r < kn ? kb + (key0 + r) * p.ks.st : -1; });
  load_rows<D, LD, kBwdThreads>(sV, p.v, BN, [&](int r) -> int64_t { return r < kn ? vb + (key0 + r) * p.vs.st : -1; });

  // dK / dV accumulators: warp owns keys [kw, kw + 16) x head dims [dw, dw + DW).
  const int kw = (warp % KG) * 16, dw = (warp / KG) * DW;
  // Scores: warp owns rows [rw, rw + 16) x keys [cw, cw + CW); dQ: rows [rw, rw + 16) x dims [qdw, qdw + DH).
  const int rw = (warp & 3) * 16, cw = (warp >> 2) * CW, qdw = (warp >> 2) * DH;
  float dk[DW / 8][4], dv[DW / 8][4];
#pragma unroll
  for (int nt = 0; nt < DW / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;

  const int64_t Rlo = int64_t(first) * GB, Rhi = int64_t(last) * GB;
  const int64_t qb = int64_t(b) * p.qs.sb, dob = int64_t(b) * p.dos.sb;
  for (int64_t R0 = Rlo; R0 < Rhi; R0 += kBM) {
    __syncthreads();  // the previous row tile is fully consumed
    if (tid < kBM) {
      const int64_t R = R0 + tid;
      if (R < Rhi) {
        const int bi = int(R / GB), rem = int(R % GB), g = rem / p.B, j = rem % p.B;
        const RowRanges rr = row_ranges(sanchor[bi], j, p.B, p.window, ctx_start_of(p, b, order[bi]));
        const int tok = order[bi] * p.B + j, qh = h * p.G + g;
        if (own) {
          rs.clo[tid] = -c0;
          rs.chi[tid] = int(rr.blk_hi) - c0;
        } else {
          rs.clo[tid] = int(rr.ctx_lo - key0);
          rs.chi[tid] = int(rr.ctx_hi - key0);
        }
        rs.tok[tid] = tok;
        rs.qh[tid] = qh;
        rs.lse[tid] = p.lse[(int64_t(b) * p.Hq + qh) * p.Tq + tok] * kLog2e;
        rs.delta[tid] = p.delta[ws_row(p, b, qh, tok)];
      } else {
        rs.clo[tid] = rs.chi[tid] = 0;
        rs.tok[tid] = -1;
        rs.qh[tid] = 0;
        rs.lse[tid] = 0.f;
        rs.delta[tid] = 0.f;
      }
    }
    __syncthreads();
    // A row tile none of whose rows sees these keys (packed rows: blocks of a later document, whose context
    // starts past them) is skipped; every warp reads the same shared flags, so all take the same branch.
    if (!own) {
      const bool seen = (max(rs.clo[lane], 0) < min(rs.chi[lane], kn)) || (max(rs.clo[lane + 32], 0) < min(rs.chi[lane + 32], kn));
      if (!__any_sync(kFull, seen)) continue;
    }
    load_rows<D, LD, kBwdThreads>(sQ, p.q, kBM, [&](int r) -> int64_t {
      return rs.tok[r] < 0 ? -1 : qb + int64_t(rs.tok[r]) * p.qs.st + int64_t(rs.qh[r]) * p.qs.sh;
    });
    load_rows<D, LD, kBwdThreads>(sdO, p.dout, kBM, [&](int r) -> int64_t {
      return rs.tok[r] < 0 ? -1 : dob + int64_t(rs.tok[r]) * p.dos.st + int64_t(rs.qh[r]) * p.dos.sh;
    });
    __syncthreads();

    // Phase 1: P = exp(scale QK^T - LSE) and dS = scale P (dO V^T - delta) for rows rw.., keys cw..
    if (cw < BN) {
      const int ra = rw + gid, rb = ra + 8;
      const int clo_a = rs.clo[ra], chi_a = rs.chi[ra], clo_b = rs.clo[rb], chi_b = rs.chi[rb];
      const bool vis = (max(clo_a, cw) < min(chi_a, cw + CW)) || (max(clo_b, cw) < min(chi_b, cw + CW));
      float s[NT1][4], dp[NT1][4];
#pragma unroll
      for (int nt = 0; nt < NT1; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
      if (__any_sync(kFull, vis)) {
#pragma unroll
        for (int kt = 0; kt < D / 16; ++kt) {
          uint32_t aq[4], ag[4];
          frag_a(aq, sQ, LD, rw, kt * 16, lane);
          frag_a(ag, sdO, LD, rw, kt * 16, lane);
#pragma unroll
          for (int nt = 0; nt < NT1; nt += 2) {
            uint32_t bf[2][2];
            frag_b2_nmajor(bf, sK, LD, kt * 16, cw + nt * 8, lane);
            Elem<T>::mma(s[nt], aq, bf[0][0], bf[0][1]);
            Elem<T>::mma(s[nt + 1], aq, bf[1][0], bf[1][1]);
            frag_b2_nmajor(bf, sV, LD, kt * 16, cw + nt * 8, lane);
            Elem<T>::mma(dp[nt], ag, bf[0][0], bf[0][1]);
            Elem<T>::mma(dp[nt + 1], ag, bf[1][0], bf[1][1]);
          }
        }
        const float lse_a = rs.lse[ra], lse_b = rs.lse[rb], del_a = rs.delta[ra], del_b = rs.delta[rb];
#pragma unroll
        for (int nt = 0; nt < NT1; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = cw + nt * 8 + 2 * tq + (e & 1);
            const bool top = e < 2;
            const bool v = top ? (c >= clo_a && c < chi_a) : (c >= clo_b && c < chi_b);
            const float pr = v ? exp2f(s[nt][e] * p.scale_log2 - (top ? lse_a : lse_b)) : 0.f;
            s[nt][e] = pr;
            dp[nt][e] = pr * (dp[nt][e] - (top ? del_a : del_b)) * p.scale;
          }
      }
#pragma unroll
      for (int nt = 0; nt < NT1; ++nt) {
        const int c = cw + nt * 8 + 2 * tq;
        *reinterpret_cast<uint32_t*>(sP + ra * LDP + c) = Elem<T>::pack(s[nt][0], s[nt][1]);
        *reinterpret_cast<uint32_t*>(sP + rb * LDP + c) = Elem<T>::pack(s[nt][2], s[nt][3]);
        *reinterpret_cast<uint32_t*>(sdS + ra * LDP + c) = Elem<T>::pack(dp[nt][0], dp[nt][1]);
        *reinterpret_cast<uint32_t*>(sdS + rb * LDP + c) = Elem<T>::pack(dp[nt][2], dp[nt][3]);
      }
    }
    __syncthreads();

    // Phase 2: dV += P^T dO and dK += dS^T Q over the tile's rows (the reduction dimension).
#pragma unroll
    for (int kt = 0; kt < kBM / 16; ++kt) {
      uint32_t ap[4], ads[4];
      frag_a_t(ap, sP, LDP, kw, kt * 16, lane);
      frag_a_t(ads, sdS, LDP, kw, kt * 16, lane);
#pragma unroll
      for (int nt = 0; nt < DW / 8; nt += 2) {
        uint32_t bf[2][2];
        frag_b2_kmajor(bf, sdO, LD, kt * 16, dw + nt * 8, lane);
        Elem<T>::mma(dv[nt], ap, bf[0][0], bf[0][1]);
        Elem<T>::mma(dv[nt + 1], ap, bf[1][0], bf[1][1]);
        frag_b2_kmajor(bf, sQ, LD, kt * 16, dw + nt * 8, lane);
        Elem<T>::mma(dk[nt], ads, bf[0][0], bf[0][1]);
        Elem<T>::mma(dk[nt + 1], ads, bf[1][0], bf[1][1]);
      }
    }

    // Phase 3: dQ += dS K, added to the fp32 accumulator (other key tiles add to the same rows); the
    // deterministic mode leaves dQ to dq_kernel.
    if (p.dq_acc) {
      uint32_t ads[BN / 16][4];
#pragma unroll
      for (int kt = 0; kt < BN / 16; ++kt) frag_a(ads[kt], sdS, LDP, rw, kt * 16, lane);
      const int ra = rw + gid, rb = ra + 8;
      const int tok_a = rs.tok[ra], tok_b = rs.tok[rb];
      float* dq_a = tok_a < 0 ? nullptr : p.dq_acc + ws_row(p, b, rs.qh[ra], tok_a) * D;
      float* dq_b = tok_b < 0 ? nullptr : p.dq_acc + ws_row(p, b, rs.qh[rb], tok_b) * D;
#pragma unroll
      for (int nt = 0; nt < DH / 8; nt += 2) {
        float acc[2][4] = {};
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt) {
          uint32_t bf[2][2];
          frag_b2_kmajor(bf, sK, LD, kt * 16, qdw + nt * 8, lane);
          Elem<T>::mma(acc[0], ads[kt], bf[0][0], bf[0][1]);
          Elem<T>::mma(acc[1], ads[kt], bf[1][0], bf[1][1]);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int c = qdw + (nt + u) * 8 + 2 * tq;
          if (dq_a) {
            atomicAdd(dq_a + c, acc[u][0]);
            atomicAdd(dq_a + c + 1, acc[u][1]);
          }
          if (dq_b) {
            atomicAdd(dq_b + c, acc[u][2]);
            atomicAdd(dq_b + c + 1, acc[u][3]);
          }
        }
      }
    }
  }

  // Write dK / dV of this item's keys (each key belongs to exactly one item).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = kw + gid + 8 * half;
    if (r >= kn) continue;
    uint16_t* kdst = p.dk + int64_t(b) * p.dks.sb + (key0 + r) * p.dks.st + int64_t(h) * p.dks.sh;
    uint16_t* vdst = p.dv + int64_t(b) * p.dvs.sb + (key0 + r) * p.dvs.st + int64_t(h) * p.dvs.sh;
#pragma unroll
    for (int nt = 0; nt < DW / 8; ++nt) {
      const int c = dw + nt * 8 + 2 * tq;
      *reinterpret_cast<uint32_t*>(kdst + c) = Elem<T>::pack(dk[nt][2 * half], dk[nt][2 * half + 1]);
      *reinterpret_cast<uint32_t*>(vdst + c) = Elem<T>::pack(dv[nt][2 * half], dv[nt][2 * half + 1]);
    }
  }
}

// ---- deterministic dQ ------------------------------------------------------------------------------
// dQ of a warp's 16 rows for one key tile: P = exp(scale QK^T - LSE), dS = scale P (dO V^T - delta), dQ += dS K
// in registers (dS's C fragments are the A fragments of the product, as P's are in the forward).
template <typename T, int D, int BN, int LD>
__device__ __forceinline__ void dq_tile(const uint16_t* sQ, const uint16_t* sdO, const uint16_t* sK, const uint16_t* sV,
                                        int warp, int lane, int clo_a, int chi_a, int clo_b, int chi_b,
                                        float scale_log2, float scale, float lse_a, float lse_b, float del_a,
                                        float del_b, float (&dq)[D / 8][4]) {
  const bool vis_a = max(clo_a, 0) < min(chi_a, BN), vis_b = max(clo_b, 0) < min(chi_b, BN);
  if (!__any_sync(kFull, vis_a || vis_b)) return;  // tile fully outside this warp's rows
  const int tq = lane & 3;
  float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    uint32_t aq[4], ag[4];
    frag_a(aq, sQ, LD, warp * 16, kt * 16, lane);
    frag_a(ag, sdO, LD, warp * 16, kt * 16, lane);
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt += 2) {
      uint32_t bf[2][2];
      frag_b2_nmajor(bf, sK, LD, kt * 16, nt * 8, lane);
      Elem<T>::mma(s[nt], aq, bf[0][0], bf[0][1]);
      Elem<T>::mma(s[nt + 1], aq, bf[1][0], bf[1][1]);
      frag_b2_nmajor(bf, sV, LD, kt * 16, nt * 8, lane);
      Elem<T>::mma(dp[nt], ag, bf[0][0], bf[0][1]);
      Elem<T>::mma(dp[nt + 1], ag, bf[1][0], bf[1][1]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = nt * 8 + 2 * tq + (e & 1);
      const bool top = e < 2;
      const bool v = top ? (c >= clo_a && c < chi_a) : (c >= clo_b && c < chi_b);
      const float pr = v ? exp2f(s[nt][e] * scale_log2 - (top ? lse_a : lse_b)) : 0.f;
      s[nt][e] = pr * (dp[nt][e] - (top ? del_a : del_b)) * scale;
    }
  mma_scores_by_keys<T, D, BN, LD>(dq, s, sK, lane);  // dQ += dS K
}

// The deterministic mode's dQ: one CTA per 64-row tile x KV head, walking the same key steps as the forward
// in the same order, so every row's sum has one fixed order (no atomics). Writes dq of kept rows only (the
// caller zero-fills dq).
template <typename T, int D, int BN, int STAGES>
__global__ void __launch_bounds__(kFwdThreads, 2) dq_kernel(const Params p) {
  constexpr int LD = D + kPad;
  DFLASH_DYN_SMEM(smem_raw);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sdO = sQ + kBM * LD;
  uint16_t* sK = sdO + kBM * LD;         // [STAGES][BN][LD]
  uint16_t* sV = sK + STAGES * BN * LD;  // [STAGES][BN][LD]
  __shared__ DqRowsShared ds;
  FwdRowsShared& rs = ds.rows;

  const int b = p.b0 + blockIdx.z, h = p.h0 + blockIdx.y;
  const int64_t total = int64_t(p.nkept[b]) * p.G * p.B;
  const int64_t R0 = int64_t(blockIdx.x) * kBM;
  if (R0 >= total) return;  // the same for the whole CTA
  row_tile_setup(p, b, h, R0, total, rs);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tq = lane & 3;
  if (tid < kBM) {  // the row this thread just described
    const int tok = rs.tok[tid], qh = rs.qh[tid];
    ds.lse[tid] = tok < 0 ? 0.f : p.lse[(int64_t(b) * p.Hq + qh) * p.Tq + tok] * kLog2e;
    ds.delta[tid] = tok < 0 ? 0.f : p.delta[ws_row(p, b, qh, tok)];
  }
  __syncthreads();
  const int ra = warp * 16 + gid, rb = ra + 8;
  const float lse_a = ds.lse[ra], lse_b = ds.lse[rb], del_a = ds.delta[ra], del_b = ds.delta[rb];
  float acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;

  const int64_t qb = int64_t(b) * p.qs.sb, dob = int64_t(b) * p.dos.sb;
  for_each_key_tile<D, BN, STAGES, kFwdThreads, true>(
      p, b, h, rs, R0, total, sK, sV,
      [&] {
        load_rows_async<D, LD, kFwdThreads, true>(sQ, p.q, kBM, [&](int r) -> int64_t {
          return rs.tok[r] < 0 ? -1 : qb + int64_t(rs.tok[r]) * p.qs.st + int64_t(rs.qh[r]) * p.qs.sh;
        });
        load_rows_async<D, LD, kFwdThreads, true>(sdO, p.dout, kBM, [&](int r) -> int64_t {
          return rs.tok[r] < 0 ? -1 : dob + int64_t(rs.tok[r]) * p.dos.st + int64_t(rs.qh[r]) * p.dos.sh;
        });
      },
      [&](const uint16_t* kc, const uint16_t* vc, int clo_a, int chi_a, int clo_b, int chi_b) {
        dq_tile<T, D, BN, LD>(sQ, sdO, kc, vc, warp, lane, clo_a, chi_a, clo_b, chi_b, p.scale_log2, p.scale, lse_a,
                              lse_b, del_a, del_b, acc);
      });

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half ? rb : ra;
    const int tok = rs.tok[r];
    if (tok < 0) continue;
    uint16_t* dst = p.dq + int64_t(b) * p.dqs.sb + int64_t(tok) * p.dqs.st + int64_t(rs.qh[r]) * p.dqs.sh;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + dt * 8 + 2 * tq) = Elem<T>::pack(acc[dt][2 * half], acc[dt][2 * half + 1]);
  }
}

// ---- launch geometry (shared by the CUDA launchers and the emulation) -----------------------------
inline int64_t fwd_row_tiles(const Params& p) { return (int64_t(p.N) * p.G * p.B + kBM - 1) / kBM; }
inline int64_t bwd_items(const Params& p, int BN) {
  return (p.S + BN - 1) / BN + int64_t(p.N) * ((p.B + BN - 1) / BN);
}
constexpr int kPlanThreads = 256;
constexpr int kDeltaWarps = 8;
constexpr int kConvertThreads = 256;

}  // namespace
}  // namespace dflash::kernels::cuda
