// A small CPU emulation of the CUDA execution model, enough to run the anchor-attention kernels of
// src/kernels/cuda/anchor_attention_cuda_kernels.cuh unchanged on a machine without a GPU.
//
// Every CUDA thread of a block is a ucontext coroutine on one OS thread; blocks run one after the
// other. A thread runs until it reaches a synchronisation point:
//   __syncthreads()              waits until every live thread of the block is there;
//   warp collectives (shuffle, vote, and the mma.sync emulation of the includer) deposit the lane's
//   words, wait until all 32 lanes of the warp have deposited, then read what they need.
// The scheduler stops with an error when threads cannot all make progress (a warp split between a
// collective and __syncthreads, lanes in different collectives, a collective with exited lanes),
// i.e. the divergence bugs that would hang or corrupt a real GPU run. Dynamic shared memory is exactly
// the launch's size and starts as 0xff bytes (NaN as bf16/fp16), so reads of unwritten shared memory
// show up in the results; a guard zone after it catches writes past the size (ldmatrix and cp.async
// check their addresses against the size themselves).
#pragma once
#include <ucontext.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one at a time, so a function-level static is per-block memory
#define __align__(n) alignas(n)
#define DFLASH_DYN_SMEM(name) unsigned char* name = ::cuda_emu::dynamic_smem()

namespace cuda_emu {

enum class State { Runnable, WarpWait, BlockWait, Done };
constexpr int kWords = 8;  // words a lane deposits per collective; the last one tags the collective
constexpr size_t kStackBytes = 192 * 1024;
constexpr size_t kSmemGuard = 4096;  // bytes after the dynamic shared memory that must stay 0xff

struct AsyncCopy {
  void* dst;
  const void* src;
  bool valid;
};

struct Thread {
  std::vector<std::vector<AsyncCopy>> groups;  // committed cp.async groups, oldest first
  std::vector<AsyncCopy> open;                 // issued, not yet committed
  ucontext_t ctx;
  std::vector<char> stack;
  dim3 idx;
  int warp = 0, lane = 0;
  State state = State::Runnable;
  unsigned coll = 0;  // collectives passed: selects one of two deposit buffers
};

struct Machine {
  std::vector<Thread> threads;
  ucontext_t sched;
  int current = -1;
  std::vector<uint32_t> deposits;  // [warp][parity][lane][kWords]
  std::vector<unsigned char> smem;  // the launch's dynamic shared memory, then kSmemGuard guard bytes
  size_t smem_size = 0;
  const std::function<void()>* body = nullptr;
  dim3 block_idx, block_dim, grid_dim;
};
inline Machine& machine() {
  static Machine m;
  return m;
}
inline Thread& cur() { return machine().threads[machine().current]; }
inline unsigned char* dynamic_smem() { return machine().smem.data(); }

inline void wait_as(State s) {
  Thread& t = cur();
  t.state = s;
  swapcontext(&t.ctx, &machine().sched);
}

// Deposits this lane's words (words[kWords-1] is the collective's tag), waits for the warp, and
// returns the 32 lanes' deposits ([lane][kWords]).
inline const uint32_t* warp_exchange(const uint32_t (&words)[kWords]) {
  Machine& m = machine();
  Thread& t = cur();
  uint32_t* slot = &m.deposits[(size_t(t.warp) * 2 + (t.coll & 1)) * 32 * kWords];
  std::memcpy(slot + t.lane * kWords, words, sizeof(words));
  wait_as(State::WarpWait);
  ++t.coll;
  return slot;
}

inline void thread_main() {
  (*machine().body)();
  if (!cur().groups.empty() || !cur().open.empty()) {
    std::fprintf(stderr, "cuda_emu: thread %u ended with cp.async copies never waited for\n", cur().idx.x);
    std::abort();
  }
  cur().state = State::Done;  // returning resumes the scheduler through uc_link
}

inline std::string where(const Machine& m) {
  return " in block (" + std::to_string(m.block_idx.x) + ", " + std::to_string(m.block_idx.y) + ", " +
         std::to_string(m.block_idx.z) + ")";
}

inline void run_block(Machine& m) {
  const int n = int(m.threads.size()), warps = (n + 31) / 32;
  for (int i = 0; i < n; ++i) {
    Thread& t = m.threads[i];
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = t.stack.data();
    t.ctx.uc_stack.ss_size = t.stack.size();
    t.ctx.uc_link = &m.sched;
    makecontext(&t.ctx, &thread_main, 0);
    t.idx = dim3(unsigned(i));
    t.warp = i / 32;
    t.lane = i % 32;
    t.state = State::Runnable;
    t.coll = 0;
    t.groups.clear();
    t.open.clear();
  }
  std::fill(m.smem.begin(), m.smem.end(), 0xff);
  // Greedy schedule: one warp at a time runs as far as it can (through its collectives) before the
  // next one starts; the warp order flips at every __syncthreads and between neighbouring blocks.
  // A missing barrier then lets one warp read shared memory another has not written yet, or
  // overwrite what another still needs, in some block of any grid with a few blocks.
  for (int phase = 0;; ++phase) {
    for (int wi = 0; wi < warps; ++wi) {
      const bool reverse = ((phase + m.block_idx.x + m.block_idx.y + m.block_idx.z) & 1) != 0;
      const int w = reverse ? warps - 1 - wi : wi;
      const int lanes = std::min(32, n - w * 32);
      for (;;) {
        for (int l = 0; l < lanes; ++l)
          if (m.threads[w * 32 + l].state == State::Runnable) {
            m.current = w * 32 + l;
            swapcontext(&m.sched, &m.threads[w * 32 + l].ctx);
          }
        int waiting = 0;
        for (int l = 0; l < lanes; ++l) waiting += m.threads[w * 32 + l].state == State::WarpWait;
        if (waiting == 0) break;  // the warp is at __syncthreads or done
        if (waiting != 32)
          throw std::runtime_error("cuda_emu: warp " + std::to_string(w) + " has " + std::to_string(waiting) +
                                   " of 32 lanes in a collective, the rest at __syncthreads or exited" + where(m));
        const Thread& t0 = m.threads[w * 32];
        const uint32_t* slot = &m.deposits[(size_t(w) * 2 + (t0.coll & 1)) * 32 * kWords];
        for (int l = 1; l < 32; ++l)
          if (slot[l * kWords + kWords - 1] != slot[kWords - 1] || m.threads[w * 32 + l].coll != t0.coll)
            throw std::runtime_error("cuda_emu: lanes of warp " + std::to_string(w) +
                                     " are in different collectives" + where(m));
        for (int l = 0; l < 32; ++l) m.threads[w * 32 + l].state = State::Runnable;
      }
    }
    int at_barrier = 0, done = 0;
    for (const Thread& t : m.threads) {
      at_barrier += t.state == State::BlockWait;
      done += t.state == State::Done;
    }
    if (done == n) return;
    if (at_barrier + done != n) throw std::runtime_error("cuda_emu: deadlock" + where(m));
    for (Thread& t : m.threads)
      if (t.state == State::BlockWait) t.state = State::Runnable;
  }
}

// A write past the launch's dynamic shared memory (plain stores are not checked one by one).
inline void check_smem_guard(const Machine& m) {
  for (size_t i = m.smem_size; i < m.smem.size(); ++i)
    if (m.smem[i] != 0xff)
      throw std::runtime_error("cuda_emu: a thread wrote " + std::to_string(i - m.smem_size) + " bytes past the " +
                               std::to_string(m.smem_size) + " bytes of dynamic shared memory" + where(m));
}

// Runs body() as every thread of every block of the grid (1-D blocks).
inline void launch(dim3 grid, unsigned threads, size_t smem_bytes, const std::function<void()>& body) {
  Machine& m = machine();
  m.threads.resize(threads);
  for (Thread& t : m.threads)
    if (t.stack.size() != kStackBytes) t.stack.assign(kStackBytes, 0);
  m.deposits.assign(size_t((threads + 31) / 32) * 2 * 32 * kWords, 0);
  m.smem.assign(smem_bytes + kSmemGuard, 0xff);
  m.smem_size = smem_bytes;
  m.body = &body;
  m.grid_dim = grid;
  m.block_dim = dim3(threads);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        m.block_idx = dim3(x, y, z);
        run_block(m);
        check_smem_guard(m);
      }
  m.body = nullptr;
}

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::cur().idx)
#define blockIdx (::cuda_emu::machine().block_idx)
#define blockDim (::cuda_emu::machine().block_dim)
#define gridDim (::cuda_emu::machine().grid_dim)

inline void __syncthreads() { ::cuda_emu::wait_as(::cuda_emu::State::BlockWait); }

inline float __shfl_xor_sync(unsigned, float x, int lane_mask) {
  uint32_t w[::cuda_emu::kWords] = {};
  std::memcpy(&w[0], &x, 4);
  w[::cuda_emu::kWords - 1] = 0x5f000000u + unsigned(lane_mask);
  const uint32_t* s = ::cuda_emu::warp_exchange(w);
  float r;
  std::memcpy(&r, &s[(::cuda_emu::cur().lane ^ lane_mask) * ::cuda_emu::kWords], 4);
  return r;
}
inline bool emu_vote(bool pred, bool all) {
  uint32_t w[::cuda_emu::kWords] = {};
  w[0] = pred;
  w[::cuda_emu::kWords - 1] = all ? 0xa11u : 0xa17u;
  const uint32_t* s = ::cuda_emu::warp_exchange(w);
  bool any_set = false, all_set = true;
  for (int l = 0; l < 32; ++l) {
    any_set |= s[l * ::cuda_emu::kWords] != 0;
    all_set &= s[l * ::cuda_emu::kWords] != 0;
  }
  return all ? all_set : any_set;
}
inline bool __any_sync(unsigned, bool pred) { return emu_vote(pred, false); }
inline bool __all_sync(unsigned, bool pred) { return emu_vote(pred, true); }

// One OS thread runs everything and switches only at synchronisation points, so plain
// read-modify-writes are atomic here.
inline int atomicMin(int* a, int v) {
  const int old = *a;
  if (v < old) *a = v;
  return old;
}
inline int atomicMax(int* a, int v) {
  const int old = *a;
  if (v > old) *a = v;
  return old;
}
inline float atomicAdd(float* a, float v) {
  const float old = *a;
  *a = old + v;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  const unsigned long long old = *a;
  *a = old + v;
  return old;
}
inline unsigned long long atomicMax(unsigned long long* a, unsigned long long v) {
  const unsigned long long old = *a;
  if (v > old) *a = v;
  return old;
}
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 per the PTX ISA: lanes 8i..8i+7 give the row
// addresses of 8x8 matrix i; lane l gets r[i] = M_i[l/4][2(l%4)..+1], or transposed
// (M_i[2(l%4)][l/4], M_i[2(l%4)+1][l/4]). Addresses must be 16-byte aligned rows inside the
// dynamic shared memory.
inline void emu_ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
  uint32_t w[::cuda_emu::kWords] = {};
  const uint64_t a = reinterpret_cast<uintptr_t>(row);
  w[0] = uint32_t(a);
  w[1] = uint32_t(a >> 32);
  w[::cuda_emu::kWords - 1] = trans ? 0x1d70000u : 0x1d00000u;
  const uint32_t* s = ::cuda_emu::warp_exchange(w);
  const auto& m = ::cuda_emu::machine();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(m.smem.data()), hi = lo + m.smem_size - 16;
  auto row_of = [&](int i, int r) {
    const uint32_t* d = s + (i * 8 + r) * ::cuda_emu::kWords;
    const uintptr_t p = uintptr_t(d[0]) | (uintptr_t(d[1]) << 32);
    if (p % 16 != 0 || p < lo || p > hi) {
      std::fprintf(stderr, "cuda_emu: ldmatrix row address %p is misaligned or outside shared memory\n",
                   reinterpret_cast<void*>(p));
      std::abort();
    }
    return reinterpret_cast<const uint16_t*>(p);
  };
  const int lane = ::cuda_emu::cur().lane, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    uint16_t x, y;
    if (trans) {
      x = row_of(i, 2 * t)[g];
      y = row_of(i, 2 * t + 1)[g];
    } else {
      x = row_of(i, g)[2 * t];
      y = row_of(i, g)[2 * t + 1];
    }
    r[i] = uint32_t(x) | (uint32_t(y) << 16);
  }
}
// cp.async: the destination turns to NaN bytes at issue and receives its data only when
// cp_async_wait<N> completes the group (all committed groups but the N newest). So a tile read
// before its wait, or overwritten by a prefetch while another warp still reads it, shows NaNs.
inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const auto& m = ::cuda_emu::machine();
  const uintptr_t p = reinterpret_cast<uintptr_t>(smem), lo = reinterpret_cast<uintptr_t>(m.smem.data());
  if (p % 16 != 0 || p < lo || p + 16 > lo + m.smem_size || reinterpret_cast<uintptr_t>(gmem) % 16 != 0) {
    std::fprintf(stderr, "cuda_emu: cp.async to %p from %p is misaligned or outside shared memory\n", smem, gmem);
    std::abort();
  }
  std::memset(smem, 0xff, 16);  // the destination is in flight until the wait: poison it now
  ::cuda_emu::cur().open.push_back({smem, gmem, valid});
}
inline void cp_async_commit() {
  auto& t = ::cuda_emu::cur();
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}
template <int N>
inline void cp_async_wait() {
  auto& t = ::cuda_emu::cur();
  while (t.groups.size() > size_t(N)) {
    for (const auto& c : t.groups.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    }
    t.groups.erase(t.groups.begin());
  }
}

inline void ldsm_x4(uint32_t (&r)[4], const uint16_t* row) { emu_ldmatrix_x4(r, row, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], const uint16_t* row) { emu_ldmatrix_x4(r, row, true); }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
