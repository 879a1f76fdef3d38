// The DFlash anchor-block mask in row form (docs/DFLASH.md "The attention mask"), shared by every kernel.
// A query at slot j of a block anchored at a sees two contiguous key ranges:
//   context keys [ctx_lo, ctx_hi) with ctx_hi = a (strictly before the anchor) and ctx_lo the larger of the
//   block's context start (packed rows: its document's first token; else 0) and, in sliding-window layers,
//   a + j - (window - 1), and
//   its own block's slots [0, blk_hi): all B slots, or slots <= j in sliding-window layers.
#pragma once
#include <cstdint>

// Usable from host and device code; internal linkage so copies built with different CPU flags never merge.
#if defined(__CUDACC__)
#define DFLASH_HD static inline __host__ __device__
#else
#define DFLASH_HD static inline
#endif

namespace dflash::kernels {

struct RowRanges {
  int64_t ctx_lo, ctx_hi;  // context key interval, may be empty (ctx_lo >= ctx_hi)
  int64_t blk_hi;          // own-block slots [0, blk_hi)
};

// window <= 0 means full attention (no sliding window); ctx_start is the block's context start (>= 0).
DFLASH_HD RowRanges row_ranges(int64_t anchor, int64_t slot, int64_t block_size, int64_t window,
                               int64_t ctx_start = 0) {
  RowRanges r;
  r.ctx_hi = anchor;
  const int64_t win_lo = window > 0 ? anchor + slot - (window - 1) : 0;
  r.ctx_lo = win_lo > ctx_start ? win_lo : ctx_start;
  r.blk_hi = window > 0 ? slot + 1 : block_size;
  return r;
}

// Does any slot of the block anchored at `anchor` (context start ctx_start) see a context key in [k0, k1)?
// The lowest ctx_lo of a block is that of slot 0, the highest ctx_hi is the anchor.
DFLASH_HD bool block_sees_keys(int64_t anchor, int64_t k0, int64_t k1, int64_t window, int64_t ctx_start = 0) {
  const int64_t lo = row_ranges(anchor, 0, 1, window, ctx_start).ctx_lo;
  return anchor > k0 && lo < k1 && lo < anchor;
}

}  // namespace dflash::kernels
