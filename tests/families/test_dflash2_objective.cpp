// DFlash2's objective on a training batch: the chunked selector term (top-K a vocabulary chunk at a time, blocks a
// chunk at a time) against a naive fp64 version built from full [rows, V] logits and a full sort, in both candidate
// modes, with its gradients; strict with nothing covered (0, gradient 0, finite under a loss scale); and
// drafter_loss = unary + alpha L_sel.
// The unary loss's own top-K (ops::chunked_lm_loss_with_top_k) against the selector's second pass.
#include <unistd.h>

#include <random>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "block_batch.h"
#include "chunked_lm_loss_op.h"
#include "dflash2_objective.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;

namespace {

DrafterConfig tiny_dflash2(int64_t top_k) {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"DFlash2DraftModel"};
  j["dflash_config"]["conv_kernel_size"] = 2;
  j["dflash_config"]["conv_group_size"] = 4;
  j["dflash_config"]["selector_rank"] = 6;
  j["dflash_config"]["selector_top_k"] = top_k;
  return parse_drafter_config(j, "d2.json");
}

// The objective written the plain way: full logits, a full stable sort, every row, fp64. L_sel = sum w m CE / sum w
// (SpecForge: the unary loss's denominator, not the covered weight).
struct Naive {
  at::Tensor loss, covered, recall, selector_hits;
};
Naive naive_selector(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& head, const BlockBatch& bb,
                     int64_t B, int64_t K, SelectorCandidates mode) {
  const int64_t d = hidden.size(-1);
  const at::Tensor h = hidden.reshape({-1, B, d}), labels = bb.labels.reshape({-1, B}),
                   wts = bb.weights.reshape({-1, B}), ids = bb.block_ids.reshape({-1, B});
  at::Tensor num = at::zeros({}, at::kDouble), den = num.clone(), all = num.clone(), recall = num.clone(),
             hits = num.clone();
  for (int64_t m = 0; m < h.size(0); ++m)
    for (int64_t k = 1; k < B; ++k) {
      const double wk = wts[m][k].item<double>();
      if (wk <= 0) continue;
      all = all + wk;
      const int64_t y = labels[m][k].item<int64_t>(), p = (k == 1 ? ids[m][0] : labels[m][k - 1]).item<int64_t>();
      const at::Tensor u = at::matmul(head, h[m][k]);  // [V]
      const at::Tensor order = std::get<1>(at::sort(u, /*stable=*/true, 0, /*descending=*/true));
      at::Tensor c = order.narrow(0, 0, K).clone();
      const bool inside = c.eq(y).any().item<bool>();
      int64_t idx = inside ? c.eq(y).nonzero().item<int64_t>() : K - 1;
      if (!inside && mode == SelectorCandidates::Inject) c[K - 1] = y;
      const at::Tensor g = at::matmul(w.hidden_projection, h[m][k]) * w.predecessor_codebook[p];
      const at::Tensor s = u.index_select(0, c) + at::matmul(w.successor_codebook.index_select(0, c), g);
      const bool counts = inside || mode == SelectorCandidates::Inject;
      if (counts) {
        num = num + wk * (at::logsumexp(s, 0) - s[idx]);
        den = den + wk;
      }
      recall = recall + double(inside);
      hits = hits + double(inside && s.argmax().item<int64_t>() == idx);
    }
  return {num / all, den, recall, hits};
}

}  // namespace

TEST(DFlash2Objective, ChunkedEqualsTheNaiveVersionInFp64WithGradients) {
  const int64_t K = 12, V = 32, B = 4;
  const DrafterConfig c = tiny_dflash2(K);
  at::manual_seed(3);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor head = at::randn({V, 16}, opts);
  const int64_t S = 20;
  const at::Tensor tokens = at::randint(0, V - 1, {2, S}, at::kLong);
  const at::Tensor loss_mask = at::ones({2, S}, at::kBool);
  std::mt19937_64 rng(1);
  const AnchorSample a = sample_anchors(loss_mask, 3, rng);
  const BlockBatch bb = build_block_batch(tokens, loss_mask, a, B, 31, 4.0);
  for (auto mode : {SelectorCandidates::Inject, SelectorCandidates::Strict}) {
    DrafterWeights w = init_drafter_weights(c, at::kDouble, 5, 0.3);
    w.selector.successor_codebook.normal_(0, 0.5);
    w.selector.hidden_projection.normal_(0, 0.5);
    w.selector.predecessor_codebook.normal_(0, 0.5);
    w.set_requires_grad(true);
    const at::Tensor hidden = at::randn({2, 3 * B, 16}, opts).requires_grad_(true);
    DFlash2LossOptions o;
    o.selector.top_k = K;
    o.selector.candidates = mode;
    o.selector.vocab_chunk = 7;  // several vocabulary chunks, the last one short
    o.chunk_rows = 5;            // one block (3 drafted rows) per chunk
    const DFlash2Stats st = dflash2_selector_objective(w.selector, hidden, head, bb, B, o);
    const Naive n = naive_selector(w.selector, hidden, head, bb, B, K, mode);
    ASSERT_GT(n.covered.item<double>(), 0.0);  // some targets in the top-K, some not (K = 12 of 32)
    ASSERT_LT(n.recall.item<double>(), st.terms.rows.item<double>());
    EXPECT_NEAR(st.selector_loss.item<double>(), n.loss.item<double>(), 1e-12);
    EXPECT_DOUBLE_EQ(st.terms.covered_weight.item<double>(), n.covered.item<double>());
    EXPECT_EQ(st.terms.recall_hits.item<double>(), n.recall.item<double>());
    EXPECT_EQ(st.terms.selector_hits.item<double>(), n.selector_hits.item<double>());
    const std::vector<at::Tensor> ins = {hidden, w.selector.hidden_projection, w.selector.predecessor_codebook,
                                         w.selector.successor_codebook};
    const auto g1 = torch::autograd::grad({st.selector_loss}, ins, {}, true);
    const auto g2 = torch::autograd::grad({n.loss}, ins, {}, true);
    for (size_t i = 0; i < ins.size(); ++i) EXPECT_TRUE(at::allclose(g1[i], g2[i], 1e-10, 1e-12)) << i;
    // One big chunk gives the same sums.
    o.chunk_rows = 1 << 20;
    o.selector.vocab_chunk = 8192;
    EXPECT_NEAR(dflash2_selector_objective(w.selector, hidden, head, bb, B, o).selector_loss.item<double>(),
                n.loss.item<double>(), 1e-12);
  }
}

TEST(DFlash2Objective, StrictWithNoGoldInAnyTopKIsZeroWithZeroGradientsUnderTheTrainersScale) {
  // From scratch no gold is in its top-K yet (recall@K = 0). The trainer backpropagates the loss times the
  // micro-batch's weight; the divisor used to be clamped to FLT_MIN, so that scale gave inf, times the rows' weight
  // 0: every gradient NaN at step 1. Here token 0 is every row's top-1 and no label is 0.
  const int64_t K = 1, V = 32, B = 4, d = 16;
  const DrafterConfig c = tiny_dflash2(K);
  at::manual_seed(4);
  const int64_t S = 20;
  const at::Tensor tokens = at::randint(1, V, {2, S}, at::kLong);
  std::mt19937_64 rng(2);
  const at::Tensor loss_mask = at::ones({2, S}, at::kBool);
  const BlockBatch bb = build_block_batch(tokens, loss_mask, sample_anchors(loss_mask, 3, rng), B, 31, 4.0);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opts = at::TensorOptions().dtype(dtype);
    at::Tensor head = at::randn({V, d}, opts);
    head[0].fill_(10.0);
    DrafterWeights w = init_drafter_weights(c, dtype, 5, 0.3);
    w.selector.successor_codebook.normal_(0, 0.5);
    w.set_requires_grad(true);
    const at::Tensor hidden = at::randn({2, 3 * B, d}, opts).abs().requires_grad_(true);
    DFlash2LossOptions o;
    o.selector.top_k = K;
    o.selector.candidates = SelectorCandidates::Strict;
    o.chunk_rows = 5;
    const DFlash2Stats st = dflash2_selector_objective(w.selector, hidden, head, bb, B, o);
    ASSERT_GT(st.terms.rows.item<double>(), 0.0);
    ASSERT_EQ(st.terms.recall_hits.item<double>(), 0.0);
    EXPECT_EQ(st.terms.covered_weight.item<double>(), 0.0);
    EXPECT_EQ(st.selector_loss.item<double>(), 0.0);
    const std::vector<at::Tensor> ins = {hidden, w.selector.hidden_projection, w.selector.predecessor_codebook,
                                         w.selector.successor_codebook};
    const auto g = torch::autograd::grad({st.selector_loss * 300.0}, ins, {}, false, false, true);
    for (size_t i = 0; i < ins.size(); ++i)
      EXPECT_TRUE(!g[i].defined() || g[i].abs().max().item<double>() == 0.0) << dtype << " input " << i;
  }
}

TEST(DFlash2Objective, DrafterLossIsUnaryPlusAlphaTimesTheSelectorTerm) {
  const DrafterConfig c = tiny_dflash2(4);
  DrafterWeights w = init_drafter_weights(c, at::kDouble, 2, 0.1, 0.1);
  w.selector.successor_codebook.normal_(0, 0.5);
  w.set_requires_grad(true);
  at::manual_seed(1);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  FrozenTarget t{at::randn({32, 16}, opts), at::Tensor()};
  t.lm_head = t.embed;
  const int64_t S = 14;
  const at::Tensor ids = at::randint(0, 30, {1, S}, at::kLong), mask = at::ones({1, S}, at::kBool);
  std::mt19937_64 rng(0);
  const AnchorSample s = sample_anchors(mask, 3, rng);
  const BlockBatch bb = build_block_batch(ids, mask, s, c.block_size, c.mask_token_id, 4.0);
  const at::Tensor feats = at::randn({1, S, 32}, opts);
  DrafterLossOptions opt;
  opt.attention = dflash::ops::AttentionBackend::Reference;
  opt.dflash2.selector.top_k = 4;
  opt.dflash2.selector.candidates = SelectorCandidates::Inject;  // random weights: the targets mostly miss the top-K
  opt.dflash2.selector_weight = 0.0;
  const auto unary = drafter_loss(c, w, t, feats, at::Tensor(), s, bb, opt);
  opt.dflash2.selector_weight = 0.5;
  const auto both = drafter_loss(c, w, t, feats, at::Tensor(), s, bb, opt);
  ASSERT_TRUE(both.dflash2.defined());
  EXPECT_NEAR(both.loss.item<double>(), unary.loss.item<double>() + 0.5 * both.dflash2.selector_loss.item<double>(),
              1e-12);
  EXPECT_GT(both.dflash2.blocks.blocks.item<double>(), 0.0);
  both.loss.backward();
  EXPECT_GT(w.selector.successor_codebook.grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(w.convs[0].attention_conv.kernel_projection.grad().abs().sum().item<double>(), 0.0);
}

TEST(DFlash2Objective, TopKFromTheUnaryLossLogitsEqualsTheSelectorsOwnPass) {
  // The chunked unary loss hands the selector the top-K of its own logits (no second LM-head pass). Small integers:
  // every logit is exact whatever the GEMM's shape, so both passes see the same values, with ties by construction
  // (equal head rows), and must give the same ids in the same order, the same stats and the same gradients.
  const int64_t K = 6, V = 32, B = 4, d = 16, S = 24;  // the tiny config's vocabulary
  const DrafterConfig c = tiny_dflash2(K);
  at::manual_seed(11);
  const at::Tensor tokens = at::randint(0, V - 1, {2, S}, at::kLong);
  at::Tensor loss_mask = at::ones({2, S}, at::kBool);
  loss_mask[1].narrow(0, 15, 9).fill_(false);  // rows of weight 0 inside blocks
  std::mt19937_64 rng(3);
  const BlockBatch bb = build_block_batch(tokens, loss_mask, sample_anchors(loss_mask, 4, rng), B, 31, 4.0);
  const at::Tensor weighted = (bb.weights > 0).reshape({-1});
  for (auto dtype : {at::kDouble, at::kBFloat16})
    for (const UnaryLogitOptions unary : {UnaryLogitOptions{}, UnaryLogitOptions{0.5, 30.0}})
      for (bool fused : {true, false}) {
        const auto opts = at::TensorOptions().dtype(dtype);
        at::Tensor head = at::randint(-3, 4, {V, d}, opts);
        head[30] = head[2], head[17] = head[5], head[6] = head[5];  // ties across and inside vocabulary chunks
        DrafterWeights w = init_drafter_weights(c, dtype, 5, 0.3);
        w.selector.successor_codebook.normal_(0, 0.5);
        w.set_requires_grad(true);
        const at::Tensor hidden = at::randint(-2, 3, {2, 4 * B, d}, opts).requires_grad_(true);
        DFlash2LossOptions o;
        o.selector.top_k = K;
        o.selector.unary = unary;
        o.selector.vocab_chunk = 7;
        o.chunk_rows = 6;
        dflash::ops::ChunkedLossOptions co;
        co.chunk_rows = 5;  // row chunks that cut blocks
        co.fused_ce = fused;
        const auto u = dflash::ops::chunked_lm_loss_with_top_k(hidden.reshape({-1, d}), head, bb.labels, bb.weights,
                                                               {}, {}, co, {K, unary.output_multiplier,
                                                                            unary.final_logit_softcapping});
        const Candidates own = top_candidates(hidden.detach().reshape({-1, d}), head, K, unary, 7);
        const std::string what = std::string(c10::toString(dtype)) + (fused ? " fused" : " generic") +
                                 (unary.final_logit_softcapping > 0 ? " softcap" : "");
        ASSERT_GT(weighted.sum().item<int64_t>(), 10) << what;
        EXPECT_TRUE(at::equal(u.top_ids.index({weighted}), own.ids.index({weighted}))) << what;
        EXPECT_TRUE(at::equal(u.top_logits.index({weighted}), own.logits.index({weighted}))) << what;

        const Candidates given{u.top_ids.view({2, 4 * B, K}), u.top_logits.view({2, 4 * B, K})};
        const DFlash2Stats a = dflash2_selector_objective(w.selector, hidden, head, bb, B, o);
        const DFlash2Stats b = dflash2_selector_objective(w.selector, hidden, head, bb, B, o, given);
        EXPECT_TRUE(at::equal(a.selector_loss, b.selector_loss)) << what;
        for (auto [x, y] : {std::pair{a.terms.recall_hits, b.terms.recall_hits}, {a.terms.selector_hits, b.terms.selector_hits},
                            {a.terms.covered_weight, b.terms.covered_weight}, {a.blocks.path_length_sum, b.blocks.path_length_sum},
                            {a.blocks.oracle_length_sum, b.blocks.oracle_length_sum},
                            {a.blocks.unary_length_sum, b.blocks.unary_length_sum}})
          EXPECT_TRUE(at::equal(x, y)) << what;
        const std::vector<at::Tensor> ins = {hidden, w.selector.hidden_projection, w.selector.predecessor_codebook,
                                             w.selector.successor_codebook};
        const auto ga = torch::autograd::grad({a.selector_loss}, ins, {}, true);
        const auto gb = torch::autograd::grad({b.selector_loss}, ins, {}, true);
        for (size_t i = 0; i < ins.size(); ++i) EXPECT_TRUE(at::equal(ga[i], gb[i])) << what << " input " << i;
      }
}
