// The reference attention from C++: the op entry point's Reference backend against the fused op (fp64: the
// fused op is checked against a dense fp64 mask in tests/python), the LSE of kept and dropped rows, the tile
// arithmetic the memory planner uses, and backend Auto.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "anchor_attention_op.h"
#include "anchor_attention_reference.h"

namespace {

using dflash::ops::AttentionBackend;

struct Inputs {
  at::Tensor q, k, v, dout, anchors, keep, ctx_start;
};

// 2 rows x 6 blocks: anchors 0 and S, a dropped block, packed ctx_start when asked.
Inputs make_inputs(at::ScalarType dtype, bool packed, int64_t S = 70, int64_t B = 8) {
  at::manual_seed(5);
  const int64_t N = 6, Hq = 6, Hkv = 2, D = 16;
  const auto opt = at::TensorOptions().dtype(dtype);
  Inputs in;
  in.q = at::randn({2, N * B, Hq, D}, opt);
  in.k = at::randn({2, S + N * B, Hkv, D}, opt);
  in.v = at::randn({2, S + N * B, Hkv, D}, opt);
  in.dout = at::randn({2, N * B, Hq, D}, opt);
  in.anchors = at::tensor(std::vector<int64_t>{0, S, 31, 1, 50, S, 12, 0, S, 64, 3, 40}, at::kLong).view({2, N});
  in.keep = at::tensor(std::vector<int64_t>{1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1}, at::kLong).view({2, N}).to(at::kBool);
  if (packed)
    in.ctx_start = at::tensor(std::vector<int64_t>{0, 60, 20, 0, 45, 60, 10, 0, 60, 60, 0, 35}, at::kLong).view({2, N});
  return in;
}

std::vector<at::Tensor> forward_backward(const Inputs& in, int64_t block_size, int64_t window, AttentionBackend backend) {
  auto q = in.q.clone().requires_grad_();
  auto k = in.k.clone().requires_grad_();
  auto v = in.v.clone().requires_grad_();
  auto out = dflash::ops::anchor_block_attention(q, k, v, in.anchors, in.keep, block_size, window, std::nullopt,
                                                 in.ctx_start, backend);
  auto g = torch::autograd::grad({out}, {q, k, v}, {in.dout});
  return {out.detach(), g[0], g[1], g[2]};
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(ReferenceAttention, Fp64MatchesFusedWithWindowsAndPackedRows) {
  for (const bool packed : {false, true})
    for (const int64_t window : {0, 9}) {
      const Inputs in = make_inputs(at::kDouble, packed);
      const auto ref = forward_backward(in, 8, window, AttentionBackend::Reference);
      const auto fused = forward_backward(in, 8, window, AttentionBackend::Fused);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_LT(max_diff(ref[i], fused[i]), 1e-12) << "tensor " << i << " packed " << packed << " window " << window;
    }
}

TEST(ReferenceAttention, LseIsMinusInfinityExactlyForDroppedRows) {
  const Inputs in = make_inputs(at::kFloat, true);
  const double scale = 0.25;
  auto [out, lse] = dflash::ops::anchor_attention_reference_fwd(in.q, in.k, in.v, in.anchors, in.keep, 8, 0, scale,
                                                                in.ctx_start, 1);
  auto [fout, flse] = dflash::ops::anchor_block_attention_fwd(in.q, in.k, in.v, in.anchors, in.keep, 8, 0, scale,
                                                              in.ctx_start);
  ASSERT_EQ(lse.scalar_type(), at::kFloat);
  ASSERT_EQ(lse.sizes(), flse.sizes());
  const at::Tensor row_keep = in.keep.repeat_interleave(8, 1).unsqueeze(1).expand_as(lse);  // [2, Hq, N*B]
  EXPECT_TRUE(at::isneginf(lse.masked_select(~row_keep)).all().item<bool>());
  EXPECT_TRUE(at::isfinite(lse.masked_select(row_keep)).all().item<bool>());
  EXPECT_LT(max_diff(lse.masked_select(row_keep), flse.masked_select(row_keep)), 1e-5);
  EXPECT_LT(max_diff(out, fout), 1e-5);
  // Backward from the halves: the same gradients as the fused halves.
  auto g = dflash::ops::anchor_attention_reference_bwd(in.dout, in.q, in.k, in.v, out, lse, in.anchors, in.keep, 8, 0,
                                                       scale, in.ctx_start);
  auto fg = dflash::ops::anchor_block_attention_bwd(in.dout, in.q, in.k, in.v, fout, flse, in.anchors, in.keep, 8, 0,
                                                    scale, in.ctx_start);
  EXPECT_LT(max_diff(std::get<0>(g), std::get<0>(fg)), 1e-4);
  EXPECT_LT(max_diff(std::get<1>(g), std::get<1>(fg)), 1e-4);
  EXPECT_LT(max_diff(std::get<2>(g), std::get<2>(fg)), 1e-4);
}

TEST(ReferenceAttention, TileArithmetic) {
  using dflash::ops::reference_blocks_per_tile;
  using dflash::ops::reference_tile_bytes;
  const int64_t Hq = 8, Hkv = 2, D = 128, B = 16;
  // Linear in rows, growing with the context keys.
  const int64_t one = reference_tile_bytes(B, 2048, Hq, Hkv, D, B, 4), two = reference_tile_bytes(2 * B, 2048, Hq, Hkv, D, B, 4);
  const int64_t fixed = reference_tile_bytes(0, 2048, Hq, Hkv, D, B, 4);
  EXPECT_EQ(two - one, one - fixed);
  EXPECT_GT(reference_tile_bytes(B, 4096, Hq, Hkv, D, B, 4), one);
  // The most blocks whose tile fits the budget, at least one.
  const int64_t n = reference_blocks_per_tile(2048, Hq, Hkv, D, B, 4, 64 << 20);
  EXPECT_LE(reference_tile_bytes(n * B, 2048, Hq, Hkv, D, B, 4), 64 << 20);
  EXPECT_GT(reference_tile_bytes((n + 1) * B, 2048, Hq, Hkv, D, B, 4), 64 << 20);
  EXPECT_EQ(reference_blocks_per_tile(2048, Hq, Hkv, D, B, 4, 1), 1);
  EXPECT_GE(reference_blocks_per_tile(2048, Hq, Hkv, D, B, 4), 2);  // the default budget holds several blocks
}

TEST(ReferenceAttention, AutoBackendEqualsFusedWhereTheFusedOpWorks) {
  const Inputs in = make_inputs(at::kDouble, false);
  const auto autob = forward_backward(in, 8, 0, AttentionBackend::Auto);
  const auto fused = forward_backward(in, 8, 0, AttentionBackend::Fused);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(at::equal(autob[i], fused[i])) << "tensor " << i;
}

TEST(ReferenceAttention, NoGradModeBuildsNoGraph) {
  const Inputs in = make_inputs(at::kFloat, false);
  at::NoGradGuard no_grad;
  auto out = dflash::ops::anchor_block_attention(in.q.requires_grad_(), in.k, in.v, in.anchors, in.keep, 8, 0,
                                                 std::nullopt, at::Tensor(), AttentionBackend::Reference);
  EXPECT_FALSE(out.requires_grad());
}

}  // namespace
