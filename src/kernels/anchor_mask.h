// The DFlash anchor-block mask in row form (SPEC.md "The attention mask"), shared by every kernel.
// A query at slot j of a block anchored at a sees two contiguous key ranges:
//   context keys [ctx_lo, ctx_hi) with ctx_hi = a (strictly before the anchor), and
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

// window <= 0 means full attention (no sliding window).
DFLASH_HD RowRanges row_ranges(int64_t anchor, int64_t slot, int64_t block_size, int64_t window) {
  RowRanges r;
  r.ctx_hi = anchor;
  r.ctx_lo = window > 0 ? (anchor + slot - (window - 1) > 0 ? anchor + slot - (window - 1) : 0) : 0;
  r.blk_hi = window > 0 ? slot + 1 : block_size;
  return r;
}

// Does any slot of the block anchored at `anchor` see a context key in [k0, k1)?
// The lowest ctx_lo of a block is that of slot 0, the highest ctx_hi is the anchor.
DFLASH_HD bool block_sees_keys(int64_t anchor, int64_t k0, int64_t k1, int64_t window) {
  if (anchor <= k0) return false;
  return window <= 0 || anchor - (window - 1) < k1;
}

}  // namespace dflash::kernels
