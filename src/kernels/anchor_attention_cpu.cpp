// Plan building, value checks and the choice of instruction set for the CPU attention kernel.
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "anchor_attention.h"
#include "anchor_attention_cpu_isa.h"
#include "anchor_mask.h"
#include "cpu_isa.h"

namespace dflash::kernels {
namespace {

// 64-byte aligned scratch owned by one call on one thread.
struct Scratch {
  std::unique_ptr<unsigned char[]> raw;
  unsigned char* ptr;
  explicit Scratch(int64_t bytes) : raw(new unsigned char[size_t(bytes) + 64]) {
    const auto addr = reinterpret_cast<uintptr_t>(raw.get());
    ptr = raw.get() + ((64 - addr % 64) % 64);
  }
};

int64_t anchor_at(const AnchorAttentionArgs& a, int64_t b, int64_t n) { return a.anchors[b * a.anchors_sb + n]; }
int64_t ctx_start_at(const AnchorAttentionArgs& a, int64_t b, int64_t n) {
  return a.ctx_start ? a.ctx_start[b * a.ctx_start_sb + n] : 0;
}

std::string out_of_range(const char* name, int64_t b, int64_t n, int64_t v, int64_t S) {
  return std::string(name) + "[" + std::to_string(b) + ", " + std::to_string(n) + "] = " + std::to_string(v) +
         " is outside [0, S] with context length S = " + std::to_string(S);
}

}  // namespace

std::string check_anchor_values(const AnchorAttentionArgs& a) {
  if (std::string bad = cpu_isa_switch_error(); !bad.empty()) return bad;
  const auto& s = a.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t n = 0; n < s.num_blocks; ++n) {
      const int64_t v = anchor_at(a, b, n);
      if (v < 0 || v > s.context_len) return out_of_range("anchors", b, n, v, s.context_len);
      const int64_t c = ctx_start_at(a, b, n);
      if (c < 0 || c > s.context_len) return out_of_range("ctx_start", b, n, c, s.context_len);
    }
  return {};
}

AnchorAttentionPlan plan_anchor_attention(const AnchorAttentionArgs& a, int64_t dq_partitions) {
  const auto& s = a.shape;
  const int64_t tile = cpu_key_tile(s);
  const int64_t per_item = fwd_blocks_per_item(s);
  AnchorAttentionPlan p;
  p.order_offset.push_back(0);
  for (int64_t b = 0; b < s.batch; ++b) {
    const size_t begin = p.order.size();
    for (int64_t n = 0; n < s.num_blocks; ++n)
      if (a.keep[b * a.keep_sb + n]) p.order.push_back(n);
    std::stable_sort(p.order.begin() + begin, p.order.end(),
                     [&](int64_t x, int64_t y) { return anchor_at(a, b, x) < anchor_at(a, b, y); });
    p.order_offset.push_back(int64_t(p.order.size()));
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t o0 = p.order_offset[b], o1 = p.order_offset[b + 1];
    const auto blk_sees = [&](int64_t blk, int64_t k0, int64_t k1) {
      return block_sees_keys(anchor_at(a, b, blk), k0, k1, s.window, ctx_start_at(a, b, blk));
    };
    // Forward groups never mix context starts (packed rows: one document per item), so an item's
    // context range is its blocks' own.
    std::vector<std::pair<int64_t, int64_t>> groups;  // (first, count)
    for (int64_t i = o0; i < o1;) {
      int64_t n = 1;
      while (n < per_item && i + n < o1 && ctx_start_at(a, b, p.order[i + n]) == ctx_start_at(a, b, p.order[i])) ++n;
      groups.push_back({i, n});
      i += n;
    }
    // Context tiles that some kept block sees: blocks with an anchor above the tile start, up to the
    // first one whose sliding window starts past the tile (anchors are sorted, so none after it does).
    std::vector<int64_t> tiles;
    for (int64_t k0 = 0; k0 < s.context_len; k0 += tile) {
      const int64_t k1 = std::min(k0 + tile, s.context_len);
      auto it = std::upper_bound(p.order.begin() + o0, p.order.begin() + o1, k0,
                                 [&](int64_t key, int64_t blk) { return key < anchor_at(a, b, blk); });
      for (; it != p.order.begin() + o1; ++it) {
        if (s.window > 0 && anchor_at(a, b, *it) - (s.window - 1) >= k1) break;
        if (blk_sees(*it, k0, k1)) {
          tiles.push_back(k0);
          break;
        }
      }
    }
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      for (const auto& [first, count] : groups) p.fwd.push_back({b, h, first, count});
      for (int64_t k0 : tiles) p.bwd.push_back({b, h, k0, -1});
      for (int64_t i = o0; i < o1; ++i) p.bwd.push_back({b, h, 0, p.order[i]});
    }
  }
  p.dq_partitions = std::max<int64_t>(1, std::min<int64_t>(dq_partitions, int64_t(p.bwd.size())));
  return p;
}

void anchor_attention_forward(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p, int64_t first,
                              int64_t step) {
  if (first >= int64_t(p.fwd.size())) return;
  const auto bytes = [&] { DFLASH_ISA_CALL(scratch_bytes_forward, a.shape); }();
  Scratch scratch(bytes);
  DFLASH_ISA_CALL(forward, a, p, first, step, scratch.ptr);
}

int64_t anchor_attention_delta_numel(const AnchorAttentionShape& s) {
  return s.batch * s.q_heads * s.num_blocks * s.block_size;
}
int64_t anchor_attention_dq_partition_numel(const AnchorAttentionShape& s) {
  return anchor_attention_delta_numel(s) * s.head_dim;
}

void anchor_attention_delta(const AnchorAttentionArgs& a, void* delta, int64_t row0, int64_t row1) {
  DFLASH_ISA_CALL(delta, a, delta, row0, row1);
}

void anchor_attention_backward_partition(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p,
                                         const void* delta, int64_t partition, void* dq_partial) {
  const auto bytes = [&] { DFLASH_ISA_CALL(scratch_bytes_backward, a.shape); }();
  Scratch scratch(bytes);
  DFLASH_ISA_CALL(backward, a, p, delta, partition, dq_partial, scratch.ptr);
}

void anchor_attention_reduce_dq(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p,
                                const void* dq_partials, int64_t row0, int64_t row1) {
  DFLASH_ISA_CALL(reduce_dq, a, p.dq_partitions, dq_partials, row0, row1);
}

double anchor_attention_forward_flops(const AnchorAttentionArgs& a) {
  const auto& s = a.shape;
  double pairs = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t n = 0; n < s.num_blocks; ++n) {
      if (!a.keep[b * a.keep_sb + n]) continue;
      for (int64_t j = 0; j < s.block_size; ++j) {
        const RowRanges r = row_ranges(anchor_at(a, b, n), j, s.block_size, s.window, ctx_start_at(a, b, n));
        pairs += double(std::max<int64_t>(0, r.ctx_hi - r.ctx_lo) + r.blk_hi);
      }
    }
  return pairs * double(s.q_heads) * double(s.head_dim) * 4.0;  // QK^T and PV, 2 flops per multiply-add
}

}  // namespace dflash::kernels
