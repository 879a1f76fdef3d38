// Fused anchor-block attention on the CPU: forward and backward, FlashAttention-2 style, with no
// framework types. Tensors are raw pointers with element strides for (batch, token, head); the head
// dimension must be contiguous.
//
//   q    [batch, N*B, Hq,  D]   block tokens
//   k, v [batch, S+N*B, Hkv, D] context keys then block keys
//   anchors [batch, N] int64, keep [batch, N] bool
//   ctx_start [batch, N] int64 (optional): block n's context starts there (packed rows: its document's first
//            token), so it sees context keys ctx_start <= kv < anchor; absent = 0 for every block
//   out  [batch, N*B, Hq, D],  lse [batch, Hq, N*B] (contiguous; double for fp64 inputs, else float)
//
// Work is cut into independent items so the caller can run them on any threads; results do not
// depend on how items are spread over threads (the backward reduces dQ over a fixed number of
// partitions), so runs are bit-reproducible.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "scalar_types.h"

namespace dflash::kernels {

struct Strided {
  const void* data = nullptr;
  int64_t sb = 0, st = 0, sh = 0;  // element strides of batch, token, head
};
struct StridedOut {
  void* data = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
};

struct AnchorAttentionShape {
  int64_t batch = 0, num_blocks = 0, block_size = 0, context_len = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // <= 0: full attention
  double scale = 1.0;
  ScalarType dtype = ScalarType::Float32;
};

struct AnchorAttentionArgs {
  AnchorAttentionShape shape;
  Strided q, k, v;
  const int64_t* anchors = nullptr;
  int64_t anchors_sb = 0;
  const bool* keep = nullptr;
  int64_t keep_sb = 0;
  const int64_t* ctx_start = nullptr;  // null: every block's context starts at key 0
  int64_t ctx_start_sb = 0;
  // Forward writes out and lse; backward reads them.
  StridedOut out;
  void* lse = nullptr;
  // Backward only.
  Strided dout;
  StridedOut dk, dv;   // must be zero-filled by the caller (keys nobody sees keep a zero gradient)
  StridedOut dq;       // written by anchor_attention_reduce_dq
};

// A forward item holds this many query rows (whole blocks x the q-heads of one KV head): enough to
// amortise packing each key tile, small enough that its buffers stay in L2.
static inline int64_t fwd_blocks_per_item(const AnchorAttentionShape& s) {
  const int64_t rows_per_block = (s.q_heads / s.kv_heads) * s.block_size;
  return rows_per_block >= 256 ? 1 : 256 / rows_per_block;
}

// Keys per CPU tile (forward and backward items, the planner's context tiles). At head_dim <= 64, 128 rather
// than 64 halves the per-tile work that does not scale with the tile (packing a block's Q/dO rows, the
// online-softmax rescale): backward 4% faster at S 4096, D 64. At D 128 the larger tile's buffers made the
// AVX-512 forward ~5-10% slower (2026-12-08, docs/BENCHMARKS.md), so 64 there.
static inline int64_t cpu_key_tile(const AnchorAttentionShape& s) {
  const int64_t t = s.head_dim <= 64 ? 128 : 64;
  return t > s.block_size ? t : s.block_size;
}

// Work items and the anchor-sorted order of kept blocks, built once per call from anchors/keep/ctx_start.
struct AnchorAttentionPlan {
  struct FwdItem { int64_t batch, kv_head, first, count; };      // `count` kept blocks from order[first],
                                                                  // all with the same context start
  struct BwdItem { int64_t batch, kv_head, key0, block; };        // block < 0: context keys [key0, key0+T)
  std::vector<int64_t> order;         // per batch: kept block indices sorted by anchor, concatenated
  std::vector<int64_t> order_offset;  // batch -> first index into order (size batch+1)
  std::vector<FwdItem> fwd;
  std::vector<BwdItem> bwd;
  int64_t dq_partitions = 0;          // backward item i accumulates dQ into partition i % dq_partitions
};

// Validates values the shapes cannot show (anchors and ctx_start in [0, S]); returns an empty string when
// fine, otherwise a message naming the offending tensor, batch, block and value.
std::string check_anchor_values(const AnchorAttentionArgs& a);

// dQ partitions of the backward: a fixed count (not one per thread) keeps results independent of the
// thread count; each costs one fp32 copy of q, which the memory planner counts.
constexpr int64_t kDefaultDqPartitions = 4;

AnchorAttentionPlan plan_anchor_attention(const AnchorAttentionArgs& a, int64_t dq_partitions = kDefaultDqPartitions);

// Forward over items first, first+step, ... of plan.fwd. out/lse rows of dropped blocks are not
// touched: the caller zero-fills out and fills lse with -inf.
void anchor_attention_forward(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p,
                              int64_t first, int64_t step);

// Backward, three phases. delta[batch, Hq, N*B] = rowsum(dO * O) over rows [row0, row1) of the
// flattened (batch, head, token) index; then the items of one dQ partition; then the reduction.
// Workspace sizes are in accumulator elements (float, or double for fp64).
int64_t anchor_attention_delta_numel(const AnchorAttentionShape& s);
int64_t anchor_attention_dq_partition_numel(const AnchorAttentionShape& s);
void anchor_attention_delta(const AnchorAttentionArgs& a, void* delta, int64_t row0, int64_t row1);
void anchor_attention_backward_partition(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p,
                                         const void* delta, int64_t partition, void* dq_partial);
// dq rows [row0, row1) of the flattened (batch, token, head) index = sum of the partitions in order.
void anchor_attention_reduce_dq(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p,
                                const void* dq_partials, int64_t row0, int64_t row1);

// Floating-point work of one call (for GFLOP/s reports): multiply-adds x 2 over visible pairs.
double anchor_attention_forward_flops(const AnchorAttentionArgs& a);

}  // namespace dflash::kernels
