// Continuous batching (generate_batched) against one prompt at a time (generate_response) on tiny random
// Llama and Qwen3 targets: the same replies for every slot count, greedy and sampled (per-prompt streams), with
// prompts of different lengths finishing at different times (eos ids, max_new); and the layer outputs kept
// during generation against a full forward.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "batched_generator.h"
#include "response_generator.h"
#include "tiny_target.h"

using namespace dflash;
using namespace dflash::models::tiny;

namespace {

std::vector<std::vector<int64_t>> prompts(int64_t vocab, int n) {
  at::manual_seed(5);
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < n; ++i) {
    const int64_t len = 1 + (i * 7) % 13;
    at::Tensor t = at::randint(0, vocab, {len}, at::kLong);
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
  }
  return out;
}

struct Outcome {
  std::map<int64_t, data::GenerationResult> by_id;
  std::vector<int64_t> finish_order;
  data::BatchStats stats;
};

Outcome batched(const models::TargetModel& m, const data::GenerationOptions& opt, int64_t slots,
            const std::vector<std::vector<int64_t>>& ps) {
  Outcome r;
  size_t next = 0;
  r.stats = data::generate_batched(
      m, opt, slots,
      [&](data::BatchPrompt& p) {
        if (next == ps.size()) return false;
        p.id = static_cast<int64_t>(next) + 100;  // ids are the caller's, not positions
        p.stream = next;
        p.tokens = ps[next++];
        return true;
      },
      [&](int64_t id, data::GenerationResult&& g) {
        EXPECT_EQ(r.by_id.count(id), 0u) << "reply " << id << " handed back twice";
        r.finish_order.push_back(id);
        r.by_id[id] = std::move(g);
      });
  return r;
}

// Stop ids (one or two) that cut the given uncut replies at the most distinct lengths, so replies finish at
// different steps. A reply with eos ids is its uncut version up to the first of them (also when sampled: the
// draws before the stop are the same).
std::vector<int64_t> varied_stops(const std::vector<std::vector<int64_t>>& replies, int64_t vocab) {
  auto distinct = [&](const std::vector<int64_t>& stops) {
    std::set<size_t> lengths;
    for (const auto& r : replies) {
      size_t n = r.size();
      for (size_t i = 0; i < r.size(); ++i)
        if (std::find(stops.begin(), stops.end(), r[i]) != stops.end()) {
          n = i + 1;
          break;
        }
      lengths.insert(n);
    }
    return lengths.size();
  };
  std::vector<int64_t> best;
  size_t best_n = 0;
  for (int64_t a = 0; a < vocab; ++a)
    for (int64_t b = a; b < vocab; ++b) {
      const size_t n = distinct({a, b});
      if (n > best_n) best_n = n, best = {a, b};
    }
  return best;
}

void expect_same_as_one_at_a_time(const models::TargetModel& m, const data::GenerationOptions& opt) {
  const auto ps = prompts(m.config().vocab_size, 11);
  std::vector<data::GenerationResult> one;
  for (size_t i = 0; i < ps.size(); ++i) one.push_back(data::generate_response(m, ps[i], opt, i));
  int64_t total = 0;
  std::set<size_t> lengths;
  for (const auto& g : one) {
    total += static_cast<int64_t>(g.tokens.size());
    lengths.insert(g.tokens.size());
  }
  EXPECT_GE(lengths.size(), 3u) << "replies should finish at different times";
  for (int64_t slots : {1, 3, 4, 16}) {
    Outcome r = batched(m, opt, slots, ps);
    ASSERT_EQ(r.by_id.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const auto& g = r.by_id.at(static_cast<int64_t>(i) + 100);
      EXPECT_EQ(g.tokens, one[i].tokens) << "prompt " << i << ", slots " << slots;
      EXPECT_EQ(g.hit_eos, one[i].hit_eos) << "prompt " << i << ", slots " << slots;
    }
    EXPECT_EQ(r.stats.prompts, static_cast<int64_t>(ps.size()));
    EXPECT_EQ(r.stats.new_tokens, total);
    EXPECT_EQ(r.stats.decode_tokens, total - static_cast<int64_t>(ps.size()));  // all but each prefill token
    if (slots > 1) EXPECT_GT(r.stats.decode_tokens, r.stats.decode_steps);  // several rows per step
    else EXPECT_EQ(r.stats.decode_tokens, r.stats.decode_steps);
  }
}

std::vector<int64_t> stops_for(const models::TargetModel& m, const data::GenerationOptions& opt) {
  const auto ps = prompts(m.config().vocab_size, 11);
  std::vector<std::vector<int64_t>> uncut;
  for (size_t i = 0; i < ps.size(); ++i) uncut.push_back(data::generate_response(m, ps[i], opt, i).tokens);
  return varied_stops(uncut, m.config().vocab_size);
}

class BatchedGeneratorTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(BatchedGeneratorTest, GreedyMatchesOnePromptAtATime) {
  auto c = tiny_config(GetParam());
  auto m = make_model(c, random_weights(c, 31));
  data::GenerationOptions opt;
  opt.max_new = 16;
  opt.eos_ids = stops_for(m, opt);
  expect_same_as_one_at_a_time(m, opt);
}

TEST_P(BatchedGeneratorTest, SampledMatchesOnePromptAtATime) {
  auto c = tiny_config(GetParam());
  auto m = make_model(c, random_weights(c, 32));
  data::GenerationOptions opt;
  opt.max_new = 16;
  opt.temperature = 1.3;
  opt.seed = 7;
  opt.eos_ids = stops_for(m, opt);
  expect_same_as_one_at_a_time(m, opt);
}

INSTANTIATE_TEST_SUITE_P(Archs, BatchedGeneratorTest, ::testing::Values("llama", "qwen3"));

TEST(BatchedGenerator, OneTokenRepliesAndBadSlots) {
  auto c = tiny_config("llama");
  auto m = make_model(c, random_weights(c, 33));
  data::GenerationOptions opt;
  opt.max_new = 1;
  const auto ps = prompts(c.vocab_size, 5);
  Outcome r = batched(m, opt, 2, ps);
  ASSERT_EQ(r.by_id.size(), ps.size());
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(r.by_id.at(static_cast<int64_t>(i) + 100).tokens, data::generate_response(m, ps[i], opt, i).tokens);
  EXPECT_EQ(r.stats.decode_steps, 0);
  EXPECT_THROW(batched(m, opt, 0, ps), std::invalid_argument);
  EXPECT_THROW(batched(m, opt, 2, {{1, 2}, {}}), std::invalid_argument);
}

// Features kept during generation (capture_layers) must equal those of one full forward over prompt + reply,
// for every position including the reply's last token (read by an extra step); the replies themselves must
// not change. Layer L-1 checks the final-normed state HF reports for the last layer.
TEST_P(BatchedGeneratorTest, CapturedFeaturesMatchAFullForward) {
  auto c = tiny_config(GetParam());
  auto m = make_model(c, random_weights(c, 34));
  data::GenerationOptions opt;
  opt.max_new = 12;
  opt.eos_ids = stops_for(m, opt);
  const auto ps = prompts(c.vocab_size, 9);
  const Outcome plain = batched(m, opt, 3, ps);
  const int L = static_cast<int>(c.num_hidden_layers);
  opt.capture_layers = {L - 1, 0};  // not sorted: the stored order is the order asked for
  opt.feature_dtype = at::kFloat;
  const Outcome kept = batched(m, opt, 3, ps);
  ASSERT_EQ(kept.by_id.size(), ps.size());
  EXPECT_EQ(kept.stats.feature_rows, static_cast<int64_t>(ps.size()));  // one extra row per reply
  EXPECT_EQ(kept.stats.new_tokens, plain.stats.new_tokens);
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto& g = kept.by_id.at(static_cast<int64_t>(i) + 100);
    EXPECT_EQ(g.tokens, plain.by_id.at(static_cast<int64_t>(i) + 100).tokens) << "prompt " << i;
    std::vector<int64_t> ids = ps[i];
    ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
    const auto o = m.forward(at::tensor(ids, at::kLong).view({1, -1}), nullptr, opt.capture_layers, false, false);
    const at::Tensor want = at::cat({o.hidden.at(L - 1)[0], o.hidden.at(0)[0]}, -1);
    ASSERT_TRUE(g.features.defined()) << "prompt " << i;
    ASSERT_EQ(g.features.sizes(), want.sizes()) << "prompt " << i;
    EXPECT_LT((g.features - want).abs().max().item<double>(), 1e-4) << "prompt " << i;
  }
}

TEST(BatchedGenerator, CapturedFeaturesOfOneTokenReplies) {
  auto c = tiny_config("llama");
  auto m = make_model(c, random_weights(c, 35));
  data::GenerationOptions opt;
  opt.max_new = 1;
  opt.capture_layers = {1};
  const auto ps = prompts(c.vocab_size, 4);
  Outcome r = batched(m, opt, 2, ps);
  ASSERT_EQ(r.by_id.size(), ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto& g = r.by_id.at(static_cast<int64_t>(i) + 100);
    ASSERT_EQ(g.tokens.size(), 1u);
    std::vector<int64_t> ids = ps[i];
    ids.push_back(g.tokens[0]);
    const auto o = m.forward(at::tensor(ids, at::kLong).view({1, -1}), nullptr, {1}, false, false);
    ASSERT_EQ(g.features.size(0), static_cast<int64_t>(ids.size()));
    EXPECT_LT((g.features.to(at::kFloat) - o.hidden.at(1)[0]).abs().max().item<double>(), 0.05);  // bf16 storage
  }
  EXPECT_EQ(r.stats.decode_tokens, 0);
  EXPECT_EQ(r.stats.feature_rows, static_cast<int64_t>(ps.size()));
}
