// The routed MoE block (moe_block.h) against a dense float64 reference that runs every expert on every token and
// weights it by its routing weight (0 when not picked), for top-k edge cases and empty inputs; the routing itself
// against a softmax / top-k written out; and the cost model's total vs active parameters on the MoE presets.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "moe_block.h"
#include "target_cost.h"
#include "target_presets.h"

using namespace dflash::models;

namespace {

MoeWeights random_moe(int64_t E, int64_t H, int64_t I, int64_t S) {
  auto o = at::TensorOptions().dtype(at::kDouble);
  MoeWeights w;
  w.router = at::randn({E, H}, o);
  w.gate_up = at::randn({E, 2 * I, H}, o) / std::sqrt(double(H));
  w.down = at::randn({E, H, I}, o) / std::sqrt(double(I));
  if (S > 0) {
    w.shared_gate_proj = at::randn({S, H}, o);
    w.shared_up = at::randn({S, H}, o);
    w.shared_down = at::randn({H, S}, o);
    w.shared_gate = at::randn({1, H}, o);
  }
  return w;
}

at::Tensor dense_reference(const MoeWeights& w, const MoeConfig& c, const at::Tensor& x) {
  const int64_t I = w.down.size(2);
  // the router's probabilities in float32 whatever the model dtype (as transformers)
  at::Tensor probs = at::softmax(at::matmul(x, w.router.t()).to(at::kFloat), -1);
  // the k largest by sorting (a different code path than at::topk); no ties with random weights
  at::Tensor sorted = std::get<0>(at::sort(probs, -1, /*descending=*/true));
  at::Tensor kth = sorted.narrow(-1, c.top_k - 1, 1);
  at::Tensor picked = probs * (probs >= kth).to(probs.scalar_type());
  if (c.norm_topk_prob) picked = picked / picked.sum(-1, true);
  picked = picked.to(x.scalar_type());
  at::Tensor out = at::zeros_like(x);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    at::Tensor gu = at::matmul(x, w.gate_up[e].t());
    at::Tensor y = at::matmul(at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I), w.down[e].t());
    out = out + picked.select(-1, e).unsqueeze(-1) * y;
  }
  if (w.shared_gate.defined())
    out = out + at::sigmoid(at::matmul(x, w.shared_gate.t())) *
                    at::matmul(at::silu(at::matmul(x, w.shared_gate_proj.t())) * at::matmul(x, w.shared_up.t()),
                               w.shared_down.t());
  return out;
}

}  // namespace

TEST(MoeBlock, EqualsDenseAllExpertsReference) {
  at::manual_seed(3);
  struct Case { int64_t E, k; bool norm; int64_t shared; };
  for (const Case cs : {Case{6, 2, true, 0}, Case{6, 1, false, 0}, Case{5, 5, true, 0}, Case{7, 3, false, 9},
                        Case{4, 2, true, 9}}) {
    MoeConfig c;
    c.num_experts = cs.E, c.top_k = cs.k, c.norm_topk_prob = cs.norm, c.expert_intermediate = 12;
    c.shared_intermediate = cs.shared;
    const MoeWeights w = random_moe(cs.E, 16, 12, cs.shared);
    const at::Tensor x = at::randn({3, 11, 16}, at::kDouble);
    const at::Tensor got = moe_forward(w, c, x);
    EXPECT_EQ(got.sizes(), x.sizes());
    // float32 routing weights (their renormalising sums may round in another order): 1e-6 of the output range
    const at::Tensor ref = dense_reference(w, c, x);
    EXPECT_LT((got - ref).abs().max().item<double>(), 1e-6 * ref.abs().max().item<double>())
        << "E=" << cs.E << " k=" << cs.k << " shared=" << cs.shared;
  }
}

TEST(MoeBlock, RoutingWeightsAndEmptyInput) {
  at::manual_seed(4);
  MoeConfig c;
  c.num_experts = 8, c.top_k = 3, c.norm_topk_prob = true, c.expert_intermediate = 4;
  const MoeWeights w = random_moe(8, 16, 4, 0);
  const at::Tensor x = at::randn({20, 16}, at::kDouble);
  const MoeRouting r = moe_route(w, c, x);
  EXPECT_EQ(r.experts.sizes(), (std::vector<int64_t>{20, 3}));
  EXPECT_EQ(r.weights.scalar_type(), at::kDouble);
  EXPECT_LT((r.weights.sum(-1) - 1).abs().max().item<double>(), 1e-6);  // renormalised (in float32)
  // each token's picks are distinct and the most probable ones, in descending order
  const at::Tensor probs = at::softmax(at::matmul(x, w.router.t()), -1);
  EXPECT_TRUE(at::equal(std::get<1>(at::sort(probs, -1, true)).narrow(-1, 0, 3), r.experts));
  // a forward of no tokens (an empty slice) is an empty output, not an error
  EXPECT_EQ(moe_forward(w, c, x.narrow(0, 0, 0)).numel(), 0);
}

TEST(MoeCost, PresetsCountAllExpertsForMemoryAndActiveOnesForFlops) {
  // Qwen3-30B-A3B: 30.5B parameters, 3.3B active (its model card), of which ~0.62B embedding + LM head.
  const TargetConfig q3 = target_preset("qwen3-30b-a3b");
  EXPECT_NEAR(double(target_params(q3)) / 1e9, 30.5, 0.3);
  const double active = target_forward_flops(q3, 1, false).linear / 2;
  EXPECT_NEAR((active + 2.0 * double(q3.vocab_size * q3.hidden_size)) / 1e9, 3.3, 0.15);
  // Qwen3.6-35B-A3B: ~35B parameters (the MTP head and vision tower are not loaded), ~3B active.
  const TargetConfig q36 = target_preset("qwen3.6-35b-a3b");
  EXPECT_NEAR(double(target_params(q36)) / 1e9, 34.7, 0.6);
  EXPECT_NEAR(target_forward_flops(q36, 1, true).total() / 2 / 1e9, 3.0, 0.4);
  // Memory holds every expert: bf16 weights of all stages add up to 2 bytes per parameter.
  double bytes = 0;
  for (const StageMemory& s : target_stage_memory(q3, 2, 4, 16, {})) bytes += s.weights;
  EXPECT_NEAR(bytes, 2.0 * double(target_params(q3)), 1e6);
}
