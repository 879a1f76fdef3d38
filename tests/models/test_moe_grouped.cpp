// The grouped-GEMM path of the MoE block (moe_grouped.h) against the per-expert loop: the dispatch layout
// (sorted slots, counts, int32 running ends) against one written out, and the grouped run through LibTorch's
// at::_grouped_mm on CPU (its per-group loop) equal to ours, with experts that get no token, top-k = all and a
// single token. MoeGroupedCuda runs the same comparison on a GPU in bfloat16, where the fused kernel runs
// (scripts/gpu_check.sh); it skips without CUDA, and fails there when DFLASH_REQUIRE_CUDA is set.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "moe_block.h"
#include "moe_grouped.h"

using namespace dflash::models;

namespace {

MoeWeights random_experts(int64_t E, int64_t H, int64_t I, at::TensorOptions o) {
  MoeWeights w;
  w.router = at::randn({E, H}, o);
  w.gate_up = at::randn({E, 2 * I, H}, o) / std::sqrt(double(H));
  w.down = at::randn({E, H, I}, o) / std::sqrt(double(I));
  return w;
}

MoeConfig config(int64_t E, int64_t k, int64_t I) {
  MoeConfig c;
  c.num_experts = E, c.top_k = k, c.norm_topk_prob = true, c.expert_intermediate = I;
  return c;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() /
         std::max(1e-30, b.to(at::kDouble).abs().max().item<double>());
}

}  // namespace

TEST(MoeGrouped, DispatchLayoutMatchesAWrittenOutSort) {
  // 5 tokens, top-2 of 4 experts; expert 3 gets nothing
  MoeRouting r;
  r.experts = at::tensor({1, 0, 2, 1, 0, 2, 1, 2, 0, 1}, at::kLong).view({5, 2});
  r.weights = at::arange(10, at::kFloat).view({5, 2});
  const MoeDispatch d = moe_dispatch(r, 4);
  // expert 0: slots 1, 4, 8 (tokens 0, 2, 4); expert 1: slots 0, 3, 6, 9 (tokens 0, 1, 3, 4); expert 2: 2, 5, 7
  EXPECT_TRUE(at::equal(d.tokens, at::tensor({0, 2, 4, 0, 1, 3, 4, 1, 2, 3}, at::kLong)));
  EXPECT_TRUE(at::equal(d.weights.view({-1}), at::tensor({1, 4, 8, 0, 3, 6, 9, 2, 5, 7}, at::kFloat)));
  EXPECT_TRUE(at::equal(d.counts, at::tensor({3, 4, 3, 0}, at::kLong)));
  EXPECT_EQ(d.offsets.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(d.offsets, at::tensor({3, 7, 10, 10}, at::kInt)));
}

TEST(MoeGrouped, GroupedGemmEqualsTheLoopOnCpu) {
  at::manual_seed(5);
  struct Case { int64_t E, k, N; bool starve; };
  for (const Case cs : {Case{6, 2, 40, false}, Case{6, 2, 40, true}, Case{5, 5, 17, false}, Case{8, 3, 1, false}}) {
    const int64_t H = 16, I = 8;
    MoeWeights w = random_experts(cs.E, H, I, at::TensorOptions().dtype(at::kFloat));
    // positive inputs and all-negative router rows: experts 1 and 2 are never picked (empty groups)
    if (cs.starve) w.router.narrow(0, 1, 2).fill_(-1);
    const MoeConfig c = config(cs.E, cs.k, I);
    const at::Tensor x = cs.starve ? at::randn({cs.N, H}).abs() : at::randn({cs.N, H});
    const at::Tensor loop = moe_forward(w, c, x, MoeGemm::loop);
    const at::Tensor grouped = moe_forward(w, c, x, MoeGemm::grouped);
    EXPECT_LT(rel_diff(grouped, loop), 1e-6) << "E=" << cs.E << " k=" << cs.k << " N=" << cs.N;
    if (cs.starve) EXPECT_EQ(moe_dispatch(moe_route(w, c, x), cs.E).counts.narrow(0, 1, 2).sum().item<int64_t>(), 0);
  }
  // the automatic choice stays on the loop on CPU
  const MoeWeights w = random_experts(4, 16, 8, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_FALSE(moe_grouped_gemm_usable(w, at::randn({3, 16}).to(at::kBFloat16)));
}

TEST(MoeGroupedCuda, FusedGroupedGemmEqualsTheLoopInBf16) {
  // scripts/gpu_check.sh sets DFLASH_REQUIRE_CUDA: there a skip would hide a broken build or device.
  if (!at::hasCUDA()) {
    if (std::getenv("DFLASH_REQUIRE_CUDA")) FAIL() << "no CUDA device (DFLASH_REQUIRE_CUDA is set)";
    GTEST_SKIP() << "no CUDA device";
  }
  at::manual_seed(6);
  const auto o = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  // Qwen3-30B-A3B's expert shapes (H 2048, I 768, 128 experts, top-8) on 512 tokens, a few experts starved, and a
  // small case with a single token.
  struct Case { int64_t E, k, N, H, I; };
  for (const Case cs : {Case{128, 8, 512, 2048, 768}, Case{16, 2, 1, 64, 32}}) {
    MoeWeights w = random_experts(cs.E, cs.H, cs.I, o);
    w.router.narrow(0, 0, 3).fill_(-1);  // with positive inputs, experts 0..2 get no token: empty groups
    const MoeConfig c = config(cs.E, cs.k, cs.I);
    const at::Tensor x = at::randn({cs.N, cs.H}, o).abs();
    EXPECT_EQ(moe_dispatch(moe_route(w, c, x), cs.E).counts.narrow(0, 0, 3).sum().item<int64_t>(), 0);
    ASSERT_TRUE(moe_grouped_gemm_usable(w, x));
    const at::Tensor loop = moe_forward(w, c, x, MoeGemm::loop);
    const at::Tensor grouped = moe_forward(w, c, x, MoeGemm::automatic);
    // both in bf16 with float accumulation: a few bf16 ulps of the output range
    EXPECT_LT(rel_diff(grouped, loop), 2e-2) << "E=" << cs.E << " N=" << cs.N;
    // (no float32 reference here: its routing could break near-ties between experts differently from bf16's)
    if (cs.N < 512) continue;
    // Time each path on the big case (printed for the GPU check's log; nothing asserted): .item() syncs.
    for (const MoeGemm g : {MoeGemm::loop, MoeGemm::grouped}) {
      for (int i = 0; i < 3; ++i) moe_forward(w, c, x, g).sum().item<float>();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20; ++i) moe_forward(w, c, x, g).sum().item<float>();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
      std::cout << "moe_forward " << (g == MoeGemm::loop ? "loop" : "grouped") << " E=128 k=8 N=512 H=2048 I=768 bf16: "
                << ms << " ms per call" << std::endl;
    }
  }
}
