// dflash::anchor_block_attention_reference: the DFlash anchor-block attention from LibTorch ops only (matmul,
// exp, sums; no custom kernel), so it runs on any device and dtype LibTorch runs, for when the fused kernels
// cannot run or cannot be trusted there. Same schema and semantics as anchor_attention_op.h (anchors, keep,
// window, ctx_start, GQA never expanded, dropped blocks output zero and get zero gradients, a row that sees
// no key outputs zero with LSE -inf), plus an optional tile budget:
//   torch.ops.dflash.anchor_block_attention_reference(q, k, v, anchors, keep, block_size, window, scale,
//                                                     ctx_start, tile_bytes)
//
// How: per batch row, the kept blocks sorted by anchor are cut into tiles whose temporaries fit `tile_bytes`.
// A block sees one context range and its own B keys, so a tile slices only the context keys [lo, hi) its
// blocks need (the union of their ranges) and gathers its blocks' own keys; query heads are viewed as
// [Hkv, group] against K/V's Hkv heads. Scores are computed in fp32 (fp64 for fp64 inputs) and the output
// is rounded once to the input dtype. Its own autograd function saves q, k, v, out and the row LSE only and
// recomputes each tile in backward: no autograd graph over tiles (what made the seed's per-block attention
// keep every chunk alive) and extra memory bounded by the budget plus fp32 dK/dV accumulators.
// The tile plan needs anchors, keep and ctx_start on the host: one small copy per call on a GPU.
#pragma once
#include <cstdint>
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

// Default tile budget (tile_bytes <= 0): bounds the temporaries of one tile, forward or backward. A tile
// always holds at least one block, so a block whose own temporaries exceed the budget forms a tile alone.
constexpr int64_t kDefaultReferenceTileBytes = int64_t(128) << 20;

// Bytes of one tile's temporaries: `rows` query rows (blocks x B) against `ctx_keys` context keys, in the
// accumulation dtype of `acc_bytes` bytes (4, or 8 for fp64): scores and their gradient (2 x Hq x rows x
// ctx_keys), the context K/V slices and their gradients (4 x ctx_keys x Hkv x D), the own-block scores
// (2 x Hq x rows x B) and the per-row q/dout/out/dq pieces (6 x Hq x rows x D), plus the bool mask.
int64_t reference_tile_bytes(int64_t rows, int64_t ctx_keys, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                             int64_t block_size, int64_t acc_bytes);

// Blocks per tile when every block sees `ctx_keys` context keys (the planner's worst case): >= 1.
int64_t reference_blocks_per_tile(int64_t ctx_keys, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                  int64_t block_size, int64_t acc_bytes, int64_t tile_bytes = 0);

// With autograd (through the dispatcher, like anchor_block_attention).
at::Tensor anchor_block_attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                            int64_t window = 0, std::optional<double> scale = std::nullopt,
                                            const at::Tensor& ctx_start = at::Tensor(), int64_t tile_bytes = 0);

// The two halves without autograd, as anchor_block_attention_fwd/_bwd: (out, lse [batch, Hq, N*B] in fp32,
// fp64 for fp64 inputs) and (dq, dk, dv). in_input_dtype: compute scores, softmax and sums in the input dtype
// itself (lse too), as plain low-precision PyTorch code would: the self-check's measure of what that dtype's
// rounding alone costs (attention_selfcheck.h), never what the op uses.
std::tuple<at::Tensor, at::Tensor> anchor_attention_reference_fwd(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& anchors,
                                                                  const at::Tensor& keep, int64_t block_size,
                                                                  int64_t window, double scale,
                                                                  const at::Tensor& ctx_start = at::Tensor(),
                                                                  int64_t tile_bytes = 0, bool in_input_dtype = false);
std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_attention_reference_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
    double scale, const at::Tensor& ctx_start = at::Tensor(), int64_t tile_bytes = 0, bool in_input_dtype = false);

}  // namespace dflash::ops
