// Self-consistency of the target forward on random tiny models: KV-cache decode, block verify with
// rollback (crop) and a two-stage pipeline must reproduce the plain full forward; config validation errors.
// (Agreement with Hugging Face is tested in tests/python/test_target_models.py.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "target_config.h"
#include "target_model.h"
#include "tiny_target.h"

using namespace dflash::models;
using namespace dflash::models::tiny;

namespace {

class TargetModelTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(TargetModelTest, CachedDecodeMatchesFullForward) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 1);
  TargetModel m = make_model(c, w);
  at::Tensor ids = at::randint(0, c.vocab_size, {2, 11}, at::kLong);
  TargetOutput full = m.forward(ids, nullptr, {0, 2}, true, true);
  ASSERT_EQ(full.hidden.size(), 2u);  // only the requested layers are kept
  EXPECT_EQ(full.hidden.count(1), 0u);

  KVCache cache = m.make_cache(2, 16);
  std::vector<at::Tensor> logits, h2;
  TargetOutput pre = m.forward(ids.narrow(1, 0, 5), &cache, {2}, true, false);
  logits.push_back(pre.logits);
  h2.push_back(pre.hidden.at(2));
  for (int64_t t = 5; t < 11; ++t) {
    TargetOutput o = m.forward(ids.narrow(1, t, 1), &cache, {2}, true, false);
    logits.push_back(o.logits);
    h2.push_back(o.hidden.at(2));
  }
  EXPECT_EQ(cache.length(), 11);
  EXPECT_LT(max_diff(at::cat(logits, 1), full.logits), 1e-4);
  EXPECT_LT(max_diff(at::cat(h2, 1), full.hidden.at(2)), 1e-4);
}

TEST_P(TargetModelTest, BlockVerifyWithRollbackMatchesFullForward) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 2);
  TargetModel m = make_model(c, w);
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 14}, at::kLong);
  TargetOutput full = m.forward(ids, nullptr, {1}, true, true);

  KVCache cache = m.make_cache(1, 20);
  m.forward(ids.narrow(1, 0, 6), &cache, {}, false, false);
  // A rejected block: verify junk, keep only its first token (accepted), then roll that back too.
  at::Tensor junk = (ids.narrow(1, 6, 4) + 3).remainder(c.vocab_size);
  m.forward(junk, &cache, {}, true, false);
  cache.crop(7);
  cache.crop(6);
  TargetOutput blk = m.forward(ids.narrow(1, 6, 4), &cache, {1}, true, true);
  EXPECT_LT(max_diff(blk.logits, full.logits.narrow(1, 6, 4)), 1e-4);
  EXPECT_LT(max_diff(blk.hidden.at(1), full.hidden.at(1).narrow(1, 6, 4)), 1e-4);
  EXPECT_LT(max_diff(blk.last_hidden, full.last_hidden.narrow(1, 6, 4)), 1e-4);
  // Accept 2 of the 4, continue with the real rest.
  cache.crop(8);
  TargetOutput rest = m.forward(ids.narrow(1, 8, 6), &cache, {}, true, false);
  EXPECT_LT(max_diff(rest.logits, full.logits.narrow(1, 8, 6)), 1e-4);
}

TEST_P(TargetModelTest, TwoCpuPipelineStagesMatchOneStage) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 3);
  TargetModel one = make_model(c, w);
  TargetLoadOptions opts;
  opts.stages = split_layers(3, {at::Device(at::kCPU), at::Device(at::kCPU)});
  ASSERT_EQ(opts.stages.size(), 2u);
  EXPECT_EQ(opts.stages[0].end, opts.stages[1].begin);
  TargetModel two = make_model(c, w, opts);
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 9}, at::kLong);
  TargetOutput a = one.forward(ids, nullptr, {0, 1, 2}, true, true);
  TargetOutput b = two.forward(ids, nullptr, {0, 1, 2}, true, true);
  EXPECT_EQ(max_diff(a.logits, b.logits), 0.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(max_diff(a.hidden.at(i), b.hidden.at(i)), 0.0);
  EXPECT_EQ(max_diff(a.hidden.at(2), a.last_hidden), 0.0);  // HF convention for the last layer
  EXPECT_EQ(max_diff(one.embed_weight(), w.at("model.embed_tokens.weight")), 0.0);
  if (c.tie_word_embeddings) EXPECT_TRUE(one.lm_head_weight().is_same(one.embed_weight()));
  else EXPECT_EQ(max_diff(one.lm_head_weight(), w.at("lm_head.weight")), 0.0);
  KVCache cache = two.make_cache(1, 9);
  two.forward(ids.narrow(1, 0, 4), &cache, {}, false, false);
  TargetOutput d = two.forward(ids.narrow(1, 4, 5), &cache, {}, true, false);
  EXPECT_LT(max_diff(d.logits, a.logits.narrow(1, 4, 5)), 1e-4);
}

TEST_P(TargetModelTest, GreedyGenerateMatchesArgmaxOfFullForward) {
  TargetConfig c = tiny_config(GetParam());
  auto w = random_weights(c, 4);
  TargetModel m = make_model(c, w);
  std::vector<int64_t> seq = {5, 17, 3};
  std::vector<int64_t> gen = m.generate(seq, 10, {});
  ASSERT_EQ(gen.size(), 10u);
  for (int64_t t : gen) {
    at::Tensor ids = at::tensor(seq, at::kLong).view({1, -1});
    int64_t expect = m.forward(ids, nullptr, {}, true, false).logits[0][-1].argmax().item<int64_t>();
    EXPECT_EQ(t, expect);
    seq.push_back(t);
  }
  // Stops at (and includes) an eos id.
  std::vector<int64_t> stop = m.generate({5, 17, 3}, 10, {gen[2]});
  const size_t first = std::find(gen.begin(), gen.end(), gen[2]) - gen.begin();
  EXPECT_EQ(stop.size(), first + 1);
  EXPECT_EQ(std::vector<int64_t>(stop.begin(), stop.end()), std::vector<int64_t>(gen.begin(), gen.begin() + first + 1));
}

INSTANTIATE_TEST_SUITE_P(Archs, TargetModelTest, ::testing::Values("llama", "qwen3"));

TEST(TargetModel, CacheLimitsAndBadInputs) {
  TargetConfig c = tiny_config("llama");
  auto w = random_weights(c, 5);
  TargetModel m = make_model(c, w);
  KVCache cache = m.make_cache(1, 4);
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 5}, at::kLong);
  EXPECT_THROW(m.forward(ids, &cache, {}, true, false), std::length_error);
  EXPECT_EQ(cache.length(), 0);
  m.forward(ids.narrow(1, 0, 3), &cache, {}, false, false);
  EXPECT_THROW(cache.crop(4), std::invalid_argument);
  EXPECT_THROW(m.forward(ids, nullptr, {3}, true, false), std::invalid_argument);
  EXPECT_THROW(m.forward(ids.view({-1}), nullptr, {}, true, false), std::invalid_argument);
  EXPECT_THROW(m.forward(ids + c.vocab_size, nullptr, {}, true, false), std::invalid_argument);
  EXPECT_THROW(m.forward(ids.narrow(1, 0, 0), nullptr, {}, true, false), std::invalid_argument);
  auto missing = w;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  try {
    make_model(c, missing);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
  }
  auto bad = w;
  bad["model.layers.0.self_attn.k_proj.weight"] = at::zeros({3, 3});
  try {
    make_model(c, bad);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected [16, 32]"), std::string::npos) << e.what();
  }
}

TEST(TargetConfig, ParsesHfJsonAndRejectsBadFields) {
  const std::string ok = R"({"model_type":"qwen3","vocab_size":100,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
    "rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"},"eos_token_id":[7,9]})";
  TargetConfig c = parse_target_config(ok, "t");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 9}));
  const std::string legacy = R"({"model_type":"llama","vocab_size":100,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":2,"num_attention_heads":4,"rope_theta":500000.0,
    "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
    "original_max_position_embeddings":8192}})";
  c = parse_target_config(legacy, "t");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);

  auto error = [](const std::string& text) {
    try {
      parse_target_config(text, "cfg");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = ok;
    s.replace(s.find(from), from.size(), to);
    return error(s);
  };
  EXPECT_NE(edit("\"qwen3\"", "\"gpt2\"").find("'model_type' is 'gpt2'"), std::string::npos);
  EXPECT_NE(edit("\"vocab_size\":100,", "").find("missing field 'vocab_size'"), std::string::npos);
  EXPECT_NE(edit("\"num_key_value_heads\":2", "\"num_key_value_heads\":3").find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(edit("\"hidden_size\":64", "\"hidden_size\":\"64\"").find("'hidden_size' must be an integer"),
            std::string::npos);
  EXPECT_NE(edit("\"default\"", "\"yarn\"").find("yarn"), std::string::npos);
  EXPECT_NE(edit("[7,9]", "[7,900]").find("eos_token_id"), std::string::npos);
  EXPECT_NE(error("{not json").find("not valid JSON"), std::string::npos);
}
