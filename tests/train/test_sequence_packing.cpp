// Sequence packing: the row plan, and the property that makes it safe: a packed micro-batch gives the same
// anchors, loss and gradients as the same samples one per row (fp64), and a block never sees another document.
#include <random>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "drafter_config.h"
#include "drafter_model.h"
#include "sequence_packing.h"
#include "step_producer.h"
#include "tiny_drafter_config.h"

using namespace dflash;
using namespace dflash::train;

namespace {

std::vector<Sample> make_samples(const std::vector<int64_t>& lengths, int64_t feat, int64_t hidden, uint64_t seed) {
  at::manual_seed(int64_t(seed));
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  std::vector<Sample> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    Sample s;
    s.input_ids = at::randint(0, 30, {n}, at::kLong);
    s.loss_mask = at::rand({n}, f64) > 0.2;
    // Every other sample has a prompt; the others are in the loss from their first token, so a label that
    // crossed into them from the previous document would count.
    if (i % 2 == 0) s.loss_mask.narrow(0, 0, n / 4).fill_(false);
    s.features = at::randn({n, feat}, f64);
    s.last_hidden = at::randn({n, hidden}, f64);
    out.push_back(s);
  }
  return out;
}

struct StepRun {
  drafter::DrafterLossResult r;
  std::vector<at::Tensor> grads;
  MicroBatch mb;
};

// collate (+ pack) -> anchors -> blocks -> loss and gradients, like the step producer and a worker.
StepRun run_step(const drafter::DrafterConfig& c, const drafter::DrafterWeights& w, const drafter::FrozenTarget& t,
        const std::vector<Sample>& samples, bool pack, int64_t max_len, int64_t num_anchors,
                 drafter::CheckpointPolicy ckpt) {
  StepRun out;
  out.mb = collate(samples, max_len, 8);
  if (pack) pack_micro_batch(out.mb, max_len, num_anchors, 8);
  std::mt19937_64 rng(42);
  out.mb.anchors = drafter::sample_anchors(out.mb.loss_mask, num_anchors, rng, out.mb.anchors.doc_start);
  drafter::DrafterLossOptions opt;
  opt.gamma = 4;
  opt.chunk.kl_weight = 0.15;
  opt.chunk.chunk_rows = 7;
  out.mb.blocks = drafter::build_block_batch(out.mb.input_ids, out.mb.loss_mask, out.mb.anchors, c.block_size,
                                             c.mask_token_id, opt.gamma);
  for (auto& p : w.parameters()) p.mutable_grad() = at::Tensor();
  out.r = drafter::drafter_loss(c, w, t, out.mb.features, out.mb.last_hidden, out.mb.anchors, out.mb.blocks, opt, ckpt);
  out.r.loss.backward();
  for (auto& p : w.parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

}  // namespace

TEST(SequencePacking, RowsFillInOrderWithinTokensAndAnchors) {
  const std::vector<int64_t> none(5, 0);
  EXPECT_EQ(plan_rows({5, 3, 4, 8, 1}, none, 8, 4), (std::vector<std::vector<int64_t>>{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(plan_rows({2, 2, 2, 2}, {0, 0, 0, 0}, 8, 4), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  // In order, never reordered to fill gaps: sample 2 (1 token) would fit in row 0 but follows sample 1.
  EXPECT_EQ(plan_rows({6, 5, 1}, {0, 0, 0}, 8, 4), (std::vector<std::vector<int64_t>>{{0}, {1, 2}}));
  // The anchor budget starts a row too: 3 + 2 > 4 anchors although 6 tokens fit.
  EXPECT_EQ(plan_rows({3, 3, 2}, {3, 2, 1}, 8, 4), (std::vector<std::vector<int64_t>>{{0}, {1, 2}}));
  EXPECT_EQ(plan_rows({3, 3, 2}, {2, 2, 0}, 8, 4), (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
  EXPECT_EQ(plan_rows({8, 8}, {4, 4}, 8, 4), (std::vector<std::vector<int64_t>>{{0}, {1}}));  // full rows
  EXPECT_THROW(plan_rows({9}, {0}, 8, 4), std::invalid_argument);   // longer than max_len: truncate first
  EXPECT_THROW(plan_rows({3}, {5}, 8, 4), std::invalid_argument);   // more anchors than num_anchors
  EXPECT_THROW(plan_rows({3, 3}, {1}, 8, 4), std::invalid_argument);  // one count per sample
}

TEST(SequencePacking, AnchorCapacityCountsValidPositionsCapped) {
  const at::Tensor m = at::tensor({1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1}, at::kLong).to(at::kBool).view({2, 6});
  // Row 0 (5 real tokens: 1 1 1 0 1): anchors 0, 1. Row 1 (6 tokens: 1 1 0 1 1 1): 0, 3, 4, capped at 2.
  EXPECT_EQ(anchor_capacity(m, {5, 6}, 8), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(anchor_capacity(m, {5, 6}, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(anchor_capacity(m, {2, 6}, 8), (std::vector<int64_t>{1, 3}));  // past the length: not counted
}

TEST(SequencePacking, PackRowsKeepsDocumentsTruncatedAndInOrder) {
  auto s = make_samples({5, 3, 6, 11}, 2, 2, 1);
  MicroBatch mb = collate(s, 8, 1);  // sample 3 truncated to 8 tokens
  pack_micro_batch(mb, 8, 8, 1);
  ASSERT_EQ(mb.input_ids.sizes(), at::IntArrayRef({3, 8}));
  EXPECT_TRUE(at::equal(mb.input_ids[0], at::cat({s[0].input_ids, s[1].input_ids})));
  EXPECT_TRUE(at::equal(mb.input_ids[1].narrow(0, 0, 6), s[2].input_ids));
  EXPECT_TRUE(at::equal(mb.input_ids[2], s[3].input_ids.narrow(0, 0, 8)));
  EXPECT_TRUE(at::equal(mb.loss_mask[0], at::cat({s[0].loss_mask, s[1].loss_mask})));
  EXPECT_TRUE(at::equal(mb.anchors.doc_start[0], at::tensor({0, 0, 0, 0, 0, 5, 5, 5}, at::kLong)));
  EXPECT_TRUE(at::equal(mb.anchors.doc_start[1], at::tensor({0, 0, 0, 0, 0, 0, 6, 6}, at::kLong)));
  EXPECT_TRUE(at::equal(mb.anchors.doc_start[2], at::zeros({8}, at::kLong)));
  EXPECT_FALSE(mb.loss_mask[1].narrow(0, 6, 2).any().item<bool>());  // padding is never in the loss
  EXPECT_TRUE(at::equal(mb.input_ids[1].narrow(0, 6, 2), at::zeros({2}, at::kLong)));
  EXPECT_TRUE(at::equal(mb.features[0].narrow(0, 5, 3), s[1].features));
  EXPECT_TRUE(at::equal(mb.last_hidden[0].narrow(0, 0, 5), s[0].last_hidden));
  EXPECT_TRUE(at::equal(mb.features[2], s[3].features.narrow(0, 0, 8)));
  EXPECT_EQ(mb.tokens, 5 + 3 + 6 + 8);
  // Row length: the longest row rounded up to pad_multiple, never past max_len.
  MicroBatch two = collate({s[0], s[1]}, 16, 1);
  pack_micro_batch(two, 16, 16, 5);
  EXPECT_EQ(two.input_ids.sizes(), at::IntArrayRef({1, 10}));
  MicroBatch cap = collate({s[0], s[1]}, 9, 1);
  pack_micro_batch(cap, 9, 16, 5);
  EXPECT_EQ(cap.input_ids.sizes(), at::IntArrayRef({1, 9}));
}

// Anchors in a packed row: per document, the same draws as the documents one per row; the block's context
// start is its document's start; no anchor's next token is in another document.
TEST(SequencePacking, AnchorsStayInTheirDocument) {
  const at::Tensor lm = at::ones({1, 10}, at::kBool);
  const at::Tensor doc = at::tensor({0, 0, 0, 0, 4, 4, 4, 7, 7, 7}, at::kLong).view({1, 10});
  std::mt19937_64 rng(3);
  const auto a = drafter::sample_anchors(lm, 100, rng, doc);
  // Valid: 0,1,2 | 4,5 | 7,8 (3 and 6 would predict the next document's first token).
  EXPECT_TRUE(at::equal(a.anchors, at::tensor({0, 1, 2, 4, 5, 7, 8}, at::kLong).view({1, 7})));
  EXPECT_TRUE(at::equal(a.ctx_start, at::tensor({0, 0, 0, 4, 4, 7, 7}, at::kLong).view({1, 7})));
  EXPECT_TRUE(a.keep.all().item<bool>());
  // Labels past the anchor's document weigh 0: the block at 2 (slots 2..5, block 4) keeps only slot 1 (pos 3).
  const auto bb = drafter::build_block_batch(at::arange(10, at::kLong).view({1, 10}), lm, a, 4, 31, 4);
  const at::Tensor w = bb.weights.view({7, 4});
  EXPECT_GT(w[2][1].item<double>(), 0);
  EXPECT_EQ(w[2][2].item<double>(), 0);
  EXPECT_EQ(w[2][3].item<double>(), 0);
  EXPECT_GT(w[3][2].item<double>(), 0);  // block at 4: positions 5, 6 in its document, 7 not
  EXPECT_EQ(w[3][3].item<double>(), 0);
}

// The acceptance test of packing: same samples, one per row vs packed, in fp64 with soft labels, a sliding-window
// layer and GQA: the same anchors (shifted into the row), loss and gradients of every weight.
TEST(SequencePacking, PackedRowsGiveTheSameLossAndGradients) {
  const auto c = drafter::parse_drafter_config(tiny_drafter_config_json(), "tiny");
  drafter::DrafterWeights w = drafter::init_drafter_weights(c, at::kDouble, 3, 0.2, 0.1);
  w.set_requires_grad(true);
  at::manual_seed(5);
  drafter::FrozenTarget t{at::randn({32, 16}, at::kDouble), at::Tensor()};
  t.lm_head = t.embed;
  const auto samples = make_samples({13, 22, 9, 17, 30, 11}, 32, 16, 7);
  // (max_len, num_anchors, checkpoint policy, most rows): every valid position an anchor, 2+ documents a row;
  // then a random subset of each document's anchors, at least one row holding two documents.
  for (const auto& [max_len, num_anchors, policy, most_rows] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{48, 40, 0, 3}, {48, 40, 1, 3}, {64, 7, 0, 5}}) {
    const StepRun one = run_step(c, w, t, samples, false, max_len, num_anchors, {policy});
    const StepRun packed = run_step(c, w, t, samples, true, max_len, num_anchors, {policy});
    ASSERT_LE(packed.mb.input_ids.size(0), most_rows) << "the samples were packed";
    // The same anchors: per sample, the packed row's anchors minus the document start.
    std::vector<int64_t> a1, a2;
    for (int64_t b = 0; b < one.mb.anchors.anchors.size(0); ++b)
      for (int64_t n = 0; n < one.mb.anchors.anchors.size(1); ++n)
        if (one.mb.anchors.keep[b][n].item<bool>()) a1.push_back(one.mb.anchors.anchors[b][n].item<int64_t>());
    const auto& pa = packed.mb.anchors;
    for (int64_t b = 0; b < pa.anchors.size(0); ++b)
      for (int64_t n = 0; n < pa.anchors.size(1); ++n)
        if (pa.keep[b][n].item<bool>()) a2.push_back(pa.anchors[b][n].item<int64_t>() - pa.ctx_start[b][n].item<int64_t>());
    EXPECT_EQ(a1, a2);
    EXPECT_GT(a1.size(), 10u);
    EXPECT_NEAR(packed.mb.blocks.weights.sum().item<double>(), one.mb.blocks.weights.sum().item<double>(), 1e-12);
    EXPECT_LE(max_rel(packed.r.loss, one.r.loss), 1e-13) << packed.r.loss.item<double>() << " vs " << one.r.loss.item<double>();
    EXPECT_TRUE(at::equal(packed.r.slot_count, one.r.slot_count));
    const auto names = w.named();
    for (size_t i = 0; i < names.size(); ++i)
      EXPECT_LE(max_rel(packed.grads[i], one.grads[i]), 1e-11) << names[i].first << ", policy " << policy;
  }
}

// Changing everything of the other documents in a packed row (tokens, features) leaves the hidden states of a
// document's blocks unchanged; changing its own context does not.
TEST(SequencePacking, ABlockNeverSeesAnotherDocument) {
  const auto c = drafter::parse_drafter_config(tiny_drafter_config_json(), "tiny");
  const drafter::DrafterWeights w = drafter::init_drafter_weights(c, at::kDouble, 4, 0.2, 0.1);
  at::manual_seed(6);
  drafter::FrozenTarget t{at::randn({32, 16}, at::kDouble), at::Tensor()};
  t.lm_head = t.embed;
  auto samples = make_samples({14, 20, 12}, 32, 16, 9);
  for (auto& s : samples) s.loss_mask.fill_(true);
  auto hidden_of = [&](const std::vector<Sample>& ss) {
    MicroBatch mb = collate(ss, 64, 1);
    pack_micro_batch(mb, 64, 64, 1);
    std::mt19937_64 rng(1);
    mb.anchors = drafter::sample_anchors(mb.loss_mask, 4, rng, mb.anchors.doc_start);
    const auto bb = drafter::build_block_batch(mb.input_ids, mb.loss_mask, mb.anchors, c.block_size, c.mask_token_id, 4);
    at::NoGradGuard g;
    return std::make_pair(drafter::drafter_hidden(c, w, t, mb.features, bb.block_ids, mb.anchors.anchors,
                                                  mb.anchors.keep, {}, mb.anchors.doc_start, mb.anchors.ctx_start),
                          mb.anchors);
  };
  const auto [h0, an] = hidden_of(samples);
  ASSERT_EQ(h0.size(0), 1);
  // Blocks of the middle document (start 14): their rows of the hidden states.
  std::vector<int64_t> rows;
  for (int64_t n = 0; n < an.anchors.size(1); ++n)
    if (an.keep[0][n].item<bool>() && an.ctx_start[0][n].item<int64_t>() == 14)
      for (int64_t k = 0; k < c.block_size; ++k) rows.push_back(n * c.block_size + k);
  ASSERT_FALSE(rows.empty());
  const at::Tensor idx = at::tensor(rows, at::kLong);
  auto other = samples;
  for (size_t i : {size_t(0), size_t(2)}) {
    other[i].features = at::randn_like(other[i].features);
    other[i].input_ids = at::randint(0, 30, other[i].input_ids.sizes(), at::kLong);
  }
  const auto [h1, an1] = hidden_of(other);
  ASSERT_TRUE(at::equal(an1.anchors, an.anchors));
  EXPECT_LE(max_rel(h1[0].index_select(0, idx), h0[0].index_select(0, idx)), 1e-14);
  auto own = samples;
  own[1].features = at::randn_like(own[1].features);
  const auto [h2, an2] = hidden_of(own);
  EXPECT_GT(max_rel(h2[0].index_select(0, idx), h0[0].index_select(0, idx)), 1e-3);
}

// RoPE positions restart at each document of a packed row: the positions the documents have one per row.
// (Rotary scores depend only on position differences, so the loss tests above cannot see this in fp64.)
TEST(SequencePacking, RopePositionsRestartPerDocument) {
  const at::Tensor doc = at::tensor({0, 0, 0, 0, 4, 4, 4, 7, 7, 7}, at::kLong).view({1, 10});
  const at::Tensor anchors = at::tensor({1, 5, 8}, at::kLong).view({1, 3});
  const at::Tensor ctx_start = at::tensor({0, 4, 7}, at::kLong).view({1, 3});
  const auto p = drafter::rope_positions(anchors, 10, 2, doc, ctx_start);
  EXPECT_TRUE(at::equal(p.block, at::tensor({1, 2, 1, 2, 1, 2}, at::kLong).view({1, 6})));
  EXPECT_TRUE(at::equal(p.context, at::tensor({0, 1, 2, 3, 0, 1, 2, 0, 1, 2}, at::kLong).view({1, 10})));
  const auto one = drafter::rope_positions(anchors, 10, 2);  // one document: absolute positions
  EXPECT_TRUE(at::equal(one.block, at::tensor({1, 2, 5, 6, 8, 9}, at::kLong).view({1, 6})));
  EXPECT_TRUE(at::equal(one.context, at::arange(10, at::kLong).view({1, 10})));
}
