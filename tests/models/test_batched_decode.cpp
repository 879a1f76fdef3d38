// Ragged batched decode (TargetModel::decode_batch) against the single-sequence cached forward: sequences
// with different prompt lengths, joining the batch at different steps and finishing at different times must
// get the same greedy tokens and logits within 1e-4; on one and two pipeline stages, with the oneDNN matmuls;
// bad inputs are refused.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <vector>

#include "target_model.h"
#include "tiny_target.h"

using namespace dflash::models;
using namespace dflash::models::tiny;

namespace {

struct Reference {
  std::vector<int64_t> tokens;      // greedy tokens: the prefill's first, then one per decode step
  std::vector<at::Tensor> logits;   // [vocab] for each of them
};

// Greedy decode of one sequence through the single-sequence path (forward on a batch-1 cache).
Reference single_sequence(const TargetModel& m, const std::vector<int64_t>& prompt, int64_t n) {
  Reference r;
  KVCache cache = m.make_cache(1, static_cast<int64_t>(prompt.size()) + n);
  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1});
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor logits = m.forward(ids, &cache, {}, true, false).logits[0][-1];
    r.logits.push_back(logits);
    r.tokens.push_back(logits.argmax().item<int64_t>());
    ids = at::full({1, 1}, r.tokens.back(), at::kLong);
  }
  return r;
}

struct Seq {
  std::vector<int64_t> prompt;
  int64_t n = 0;       // tokens to generate
  int64_t join = 0;    // decode step at which it is prefilled and joins the batch
};

// Continuous batching by hand: prefill alone when joining, then one decode_batch per step over every live
// sequence; each row is checked against the single-sequence reference.
void check_batched(const TargetModel& m, const std::vector<Seq>& seqs) {
  std::vector<Reference> ref;
  for (const auto& s : seqs) ref.push_back(single_sequence(m, s.prompt, s.n));
  std::vector<KVCache> caches(seqs.size());
  std::vector<std::vector<int64_t>> got(seqs.size());
  std::vector<size_t> live;
  double worst = 0;
  int64_t max_rows = 0;
  for (int64_t step = 0; step < 64; ++step) {
    for (size_t j = 0; j < seqs.size(); ++j) {
      if (seqs[j].join != step) continue;
      caches[j] = m.make_cache(1, static_cast<int64_t>(seqs[j].prompt.size()) + seqs[j].n);
      at::Tensor l = m.forward(at::tensor(seqs[j].prompt, at::kLong).view({1, -1}), &caches[j], {}, true, false)
                         .logits[0][-1];
      got[j].push_back(l.argmax().item<int64_t>());
      if (seqs[j].n > 1) live.push_back(j);
    }
    if (live.empty()) continue;
    std::vector<int64_t> tokens;
    std::vector<KVCache*> cs;
    for (size_t j : live) {
      tokens.push_back(got[j].back());
      cs.push_back(&caches[j]);
    }
    max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(live.size()));
    at::Tensor logits = m.decode_batch(tokens, cs);
    ASSERT_EQ(logits.sizes(), (at::IntArrayRef{static_cast<int64_t>(live.size()), m.config().vocab_size}));
    std::vector<size_t> keep;
    for (size_t b = 0; b < live.size(); ++b) {
      const size_t j = live[b];
      const size_t k = got[j].size();  // index of the token this row produces
      worst = std::max(worst, (logits[b] - ref[j].logits[k]).abs().max().item<double>());
      got[j].push_back(logits[b].argmax().item<int64_t>());
      if (static_cast<int64_t>(got[j].size()) < seqs[j].n) keep.push_back(j);
    }
    live = keep;
  }
  for (size_t j = 0; j < seqs.size(); ++j) {
    EXPECT_EQ(got[j], ref[j].tokens) << "sequence " << j;
    EXPECT_EQ(caches[j].length(), static_cast<int64_t>(seqs[j].prompt.size()) + seqs[j].n - 1);
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_GE(max_rows, 3);  // the batch really held several sequences at once
}

std::vector<Seq> ragged_sequences(int64_t vocab) {
  at::manual_seed(11);
  auto prompt = [&](int64_t len) {
    at::Tensor t = at::randint(0, vocab, {len}, at::kLong);
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
  };
  // Different prompt lengths, start steps and reply lengths (one ends at its prefill token).
  return {{prompt(3), 9, 0}, {prompt(11), 4, 0}, {prompt(1), 7, 1}, {prompt(6), 1, 2}, {prompt(17), 6, 2},
          {prompt(5), 5, 5}};
}

class BatchedDecodeTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(BatchedDecodeTest, RaggedBatchMatchesSingleSequence) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 21);
  TargetModel m = make_model(c, w);
  check_batched(m, ragged_sequences(c.vocab_size));
}

TEST_P(BatchedDecodeTest, TwoCpuPipelineStages) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 22);
  TargetLoadOptions opts;
  opts.stages = split_layers(3, {at::Device(at::kCPU), at::Device(at::kCPU)});
  TargetModel m = make_model(c, w, opts);
  check_batched(m, ragged_sequences(c.vocab_size));
}

TEST_P(BatchedDecodeTest, OneDnnMatmuls) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 24);
  TargetModel m = make_model(c, w);
  if (!at::hasMKLDNN()) GTEST_SKIP() << "LibTorch without oneDNN";
  m.enable_onednn_decode();
  check_batched(m, ragged_sequences(c.vocab_size));
}

TEST(BatchedDecode, DynamicRopePastItsLengthUsesEachSequencesOwnLength) {
  // Sequences reach position 22 with max_position_embeddings 8: every row's frequencies are those of its own
  // length, so the batch equals each sequence decoded alone (forward takes a step's length the same way).
  TargetConfig c = tiny_config("qwen3");
  c.max_position_embeddings = 8;
  c.rope.type = "dynamic";
  c.rope.factor = 2.0;
  auto w = random_weights(c, 23);
  TargetModel m = make_model(c, w);
  check_batched(m, ragged_sequences(c.vocab_size));
}

INSTANTIATE_TEST_SUITE_P(Archs, BatchedDecodeTest, ::testing::Values("llama", "qwen3"));

TEST(BatchedDecode, RefusesBadInputsWithoutTouchingCaches) {
  TargetConfig c = tiny_config("llama");
  auto w = random_weights(c, 23);
  TargetModel m = make_model(c, w);
  KVCache a = m.make_cache(1, 4), b = m.make_cache(1, 4), two = m.make_cache(2, 4), full = m.make_cache(1, 1);
  m.forward(at::full({1, 1}, 3, at::kLong), &full, {}, false, false);
  EXPECT_THROW(m.decode_batch({}, {}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, 2}, {&a}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, 2}, {&a, nullptr}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, 2}, {&a, &a}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, 2}, {&a, &two}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, c.vocab_size}, {&a, &b}), std::invalid_argument);
  EXPECT_THROW(m.decode_batch({1, 2}, {&a, &full}), std::length_error);
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  EXPECT_EQ(full.length(), 1);
  m.decode_batch({1, 2}, {&a, &b});
  EXPECT_EQ(a.length(), 1);
  EXPECT_EQ(b.length(), 1);
}
