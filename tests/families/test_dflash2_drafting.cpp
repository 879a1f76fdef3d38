// DFlash2's drafting pieces (dflash2_drafting.h) without a target: the top-K of full unary logits is training's
// order (descending logit, equal logits by ascending id, also when a tie straddles the K-th place), and a sampled
// walk's dense q is the walk's sparse q on its candidates, zero elsewhere, with the path drawn from it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>

#include "dflash2_drafting.h"

namespace {

using namespace dflash;

TEST(DFlash2Drafting, UnaryCandidatesAreAStableDescendingSort) {
  at::manual_seed(2);
  // Integer logits in [0, 6): many ties, also at the K-th place.
  const at::Tensor u = at::randint(0, 6, {7, 40}, at::kFloat);
  for (int64_t K : {1, 3, 8, 40}) {
    const drafter::Candidates c = families::unary_candidates(u, K);
    auto [sv, si] = at::sort(u, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
    EXPECT_TRUE(c.ids.equal(si.narrow(-1, 0, K))) << K;
    EXPECT_TRUE(c.logits.equal(sv.narrow(-1, 0, K))) << K;
  }
  EXPECT_THROW(families::unary_candidates(u, 41), std::invalid_argument);
  EXPECT_THROW(families::unary_candidates(u, 0), std::invalid_argument);
}

TEST(DFlash2Drafting, SampledDraftCarriesTheSparseQ) {
  at::manual_seed(4);
  const int64_t V = 30, d = 8, r = 4, L = 3, K = 5;
  drafter::SelectorWeights w{at::randn({r, d}), at::randn({V, r}), at::randn({V, r})};
  const at::Tensor h = at::randn({L, d});
  const drafter::Candidates c = families::unary_candidates(at::randn({L, V}), K);
  const std::vector<double> uniforms = {0.1, 0.5, 0.93};
  const drafter::BlockDraft dr = families::selector_path_draft(w, c, h, 7, V, 0.8, uniforms);
  // The same walk in float32 through drafter::selector_walk on the full codebooks.
  const drafter::SelectorWalk ref = drafter::selector_walk(
      w, {c.ids.unsqueeze(0), c.logits.unsqueeze(0)}, h.unsqueeze(0), at::full({1}, 7, at::kLong), 0.8,
      at::tensor(uniforms, at::kDouble).view({1, L}));
  ASSERT_EQ(dr.tokens.size(), size_t(L));
  ASSERT_EQ(dr.probs.size(), size_t(L));
  for (int64_t k = 0; k < L; ++k) {
    EXPECT_EQ(dr.tokens[size_t(k)], ref.path[0][k].item<int64_t>());
    double total = 0;
    for (int64_t t = 0; t < V; ++t) {
      const double q = dr.probs[size_t(k)][size_t(t)];
      total += q;
      const at::Tensor hit = c.ids[k].eq(t);
      if (!hit.any().item<bool>()) {
        EXPECT_EQ(q, 0.0);
      } else {
        EXPECT_NEAR(q, ref.q[0][k].masked_select(hit).item<double>(), 1e-6);
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
  // Greedy: the argmax path, no distributions.
  const drafter::BlockDraft g = families::selector_path_draft(w, c, h, 7, V, 0.0, {});
  EXPECT_TRUE(g.probs.empty());
  const drafter::SelectorWalk gref = drafter::selector_walk(w, {c.ids.unsqueeze(0), c.logits.unsqueeze(0)},
                                                            h.unsqueeze(0), at::full({1}, 7, at::kLong));
  for (int64_t k = 0; k < L; ++k) EXPECT_EQ(g.tokens[size_t(k)], gref.path[0][k].item<int64_t>());
}

}  // namespace
