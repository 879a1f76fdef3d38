// The draft vocabulary: frequency choice and tie-breaking, the vLLM d2t/t2d format on a hand-computed case,
// label restriction (masked and counted), and the restricted loss (+ renormalised soft labels) against a dense
// float64 reference over the same rows.
#include <gtest/gtest.h>

#include <stdexcept>

#include <ATen/ATen.h>

#include "chunked_lm_loss_op.h"
#include "draft_vocab.h"

using namespace dflash::train;

namespace {
std::vector<int64_t> ids_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
}  // namespace

TEST(DraftVocab, MostFrequentWithTiesToTheLowerIdAndSpecialsKept) {
  //                          id: 0  1  2  3  4  5  6  7  8  9
  const std::vector<int64_t> counts{0, 5, 3, 5, 0, 3, 9, 0, 1, 3};
  // K=4: 6 (9), then 1 and 3 (5 each), then the lowest of the 3-count ids: 2.
  EXPECT_EQ(ids_of(select_draft_vocab(counts, 4, {})), (std::vector<int64_t>{1, 2, 3, 6}));
  // An EOS id (7, never seen) stays and pushes out the last frequent one.
  EXPECT_EQ(ids_of(select_draft_vocab(counts, 4, {7})), (std::vector<int64_t>{1, 3, 6, 7}));
  // More than the seen tokens: the lowest unseen ids fill up (0, then 4).
  EXPECT_EQ(ids_of(select_draft_vocab(counts, 9, {})), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 8, 9}));
  EXPECT_EQ(ids_of(select_draft_vocab(counts, 10, {7, 7})).size(), 10u);
  // The order of equal counts never depends on anything but the id.
  std::vector<int64_t> flat(50, 2);
  EXPECT_EQ(ids_of(select_draft_vocab(flat, 3, {})), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_THROW(select_draft_vocab(counts, 11, {}), std::invalid_argument);
  EXPECT_THROW(select_draft_vocab(counts, 1, {7, 8}), std::invalid_argument);
  EXPECT_THROW(select_draft_vocab(counts, 3, {10}), std::invalid_argument);
  try {
    select_draft_vocab(counts, 11, {});
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'draft_vocab' must be in [0, 10]"), std::string::npos) << e.what();
  }
}

TEST(DraftVocab, OffsetsAndMaskAsVllmReadsThem) {
  const at::Tensor ids = at::tensor(std::vector<int64_t>{2, 3, 7}, at::kLong);
  // target = draft + d2t[draft]: 0+2=2, 1+2=3, 2+5=7.
  EXPECT_EQ(ids_of(draft_to_target_offsets(ids)), (std::vector<int64_t>{2, 2, 5}));
  const at::Tensor t2d = target_in_draft_mask(ids, 8);
  EXPECT_EQ(t2d.scalar_type(), at::kBool);
  EXPECT_TRUE(t2d.equal(at::tensor(std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1}).to(at::kBool)));
  EXPECT_EQ(ids_of(target_to_draft_table(ids, 8)), (std::vector<int64_t>{-1, -1, 0, 1, -1, -1, -1, 2}));
  EXPECT_TRUE(draft_ids_from_offsets(draft_to_target_offsets(ids), t2d, 8, "f").equal(ids));
  // Not ascending, out of range, t2d disagreeing: clear errors.
  EXPECT_THROW(draft_ids_from_offsets(at::tensor(std::vector<int64_t>{3, 0}), {}, 8, "f"), std::invalid_argument);
  EXPECT_THROW(draft_ids_from_offsets(at::tensor(std::vector<int64_t>{2, 2, 6}), {}, 8, "f"), std::invalid_argument);
  EXPECT_THROW(draft_ids_from_offsets(at::tensor(std::vector<int64_t>{2, 2, 5}), target_in_draft_mask(ids.add(0), 9),
                                      8, "f"),
               std::invalid_argument);
  at::Tensor wrong = t2d.clone();
  wrong[0] = true;
  EXPECT_THROW(draft_ids_from_offsets(draft_to_target_offsets(ids), wrong, 8, "f"), std::invalid_argument);
}

TEST(DraftVocab, TargetsOutsideAreMaskedAndCounted) {
  const at::Tensor table = target_to_draft_table(at::tensor(std::vector<int64_t>{2, 3, 7}), 8);
  const at::Tensor labels = at::tensor(std::vector<int64_t>{7, 4, 2, 5, 0});
  const at::Tensor weights = at::tensor(std::vector<double>{1.0, 0.5, 0.25, 0.0, 1.0});
  const auto r = restrict_labels(labels, weights, table);
  EXPECT_EQ(ids_of(r.labels), (std::vector<int64_t>{2, 0, 0, 0, 0}));
  EXPECT_TRUE(r.weights.equal(at::tensor(std::vector<double>{1.0, 0.0, 0.25, 0.0, 0.0})));
  // Rows 1 and 4 lost their weight; row 3 had none to lose.
  EXPECT_TRUE(r.out_of_vocab.equal(at::tensor(std::vector<int64_t>{0, 1, 0, 0, 1}).to(at::kBool)));
}

// The op over the [K, H] rows with restricted labels equals a dense fp64 loss over the same K rows: hard CE over
// the draft vocabulary, and KL against the teacher's softmax renormalised over it.
TEST(DraftVocab, RestrictedLossEqualsDenseFloat64Reference) {
  at::manual_seed(3);
  const int64_t R = 40, H = 8, V = 30;
  const at::Tensor ids = at::tensor(std::vector<int64_t>{0, 2, 3, 5, 8, 9, 13, 17, 21, 22, 29}, at::kLong);
  const at::Tensor head = at::randn({V, H}, at::kDouble);
  const at::Tensor hidden = at::randn({R, H}, at::kDouble);
  const at::Tensor teacher = at::randn({R, H}, at::kDouble);
  const at::Tensor labels = at::randint(0, V, {R}, at::kLong);
  const at::Tensor weights = at::rand({R}, at::kDouble).mul_(at::rand({R}, at::kDouble).gt(0.2));
  const auto rl = restrict_labels(labels, weights, target_to_draft_table(ids, V));
  ASSERT_GT(rl.out_of_vocab.sum().item<int64_t>(), 0);  // some targets fall outside: the case under test
  const at::Tensor sub = head.index_select(0, ids);
  for (double kl : {0.0, 0.3}) {
    dflash::ops::ChunkedLossOptions o;
    o.chunk_rows = 7;
    o.kl_weight = kl;
    const auto [loss, ce, correct] = dflash::ops::chunked_lm_loss(
        hidden, sub, rl.labels, rl.weights, kl > 0 ? teacher : at::Tensor(),
        kl > 0 ? at::arange(R, at::kLong) : at::Tensor(), o);
    // Reference: every row, dense, over the draft rows only; the weights of outside targets are 0.
    double num = 0, den = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = labels[r].item<int64_t>();
      const at::Tensor pos = (ids == t).nonzero();
      const double w = pos.numel() > 0 ? weights[r].item<double>() : 0.0;
      if (w == 0) continue;
      const at::Tensor logp = at::log_softmax(at::mv(sub, hidden[r]), 0);
      const at::Tensor logq = at::log_softmax(at::mv(sub, teacher[r]), 0);
      const double hard = -logp[pos.item<int64_t>()].item<double>();
      const double soft = (logq.exp() * (logq - logp)).sum().item<double>();
      num += w * ((1 - kl) * hard + kl * soft);
      den += w;
    }
    EXPECT_NEAR(loss.item<double>(), num / den, 1e-12 * std::max(1.0, num / den)) << "kl_weight " << kl;
  }
}
