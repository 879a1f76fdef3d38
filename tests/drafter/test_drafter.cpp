// Drafter unit tests: config parsing and errors, anchor sampler properties, block labels and loss weights by
// hand, weight I/O errors, checkpoint policy parsing (the chunked loss: tests/ops/test_chunked_lm_loss_op.cpp).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "block_batch.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;
namespace fs = std::filesystem;

namespace {

std::string error_of(const nlohmann::json& j) {
  try {
    parse_drafter_config(j, "cfg.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

fs::path temp_file(const std::string& name) { return fs::temp_directory_path() / ("dflash_drafter_test_" + name); }

}  // namespace

TEST(DrafterConfig, DefaultTargetLayerIdsFollowSpec) {
  EXPECT_EQ(default_target_layer_ids(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(default_target_layer_ids(64, 5), (std::vector<int64_t>{1, 16, 31, 46, 61}));
  EXPECT_EQ(default_target_layer_ids(30, 1), (std::vector<int64_t>{15}));
  // round() of 1 + i*(L-4)/(n-1) with Python's ties-to-even: L=30, n=5 -> 1, 7.5->8, 14, 20.5->20, 27
  EXPECT_EQ(default_target_layer_ids(30, 5), (std::vector<int64_t>{1, 8, 14, 20, 27}));
}

TEST(DrafterConfig, ParsesAndRoundTrips) {
  const DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 31);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(c.window_for_layer(0), 8);
  EXPECT_EQ(c.window_for_layer(1), 0);
  EXPECT_TRUE(c.tie_word_embeddings);
  const auto path = temp_file("config.json");
  save_drafter_config(path.string(), c);
  const DrafterConfig back = load_drafter_config(path.string());
  EXPECT_EQ(drafter_config_to_json(back), drafter_config_to_json(c));
  const auto j = drafter_config_to_json(c);
  EXPECT_EQ(j["architectures"][0], "DFlashDraftModel");
  EXPECT_EQ(j["dflash_config"]["mask_token_id"], 31);
  EXPECT_FALSE(j.contains("max_position_embeddings")) << "unknown: not written";
  auto with_len = tiny_drafter_config_json();
  with_len["max_position_embeddings"] = 4096;
  EXPECT_EQ(drafter_config_to_json(parse_drafter_config(with_len, "cfg.json"))["max_position_embeddings"], 4096);
  fs::remove(path);
}

TEST(DrafterConfig, DefaultsWhenOptionalFieldsAreAbsent) {
  auto j = tiny_drafter_config_json();
  j["dflash_config"].erase("target_layer_ids");
  j.erase("layer_types");
  j.erase("sliding_window");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "default"}};
  const DrafterConfig c = parse_drafter_config(j, "cfg.json");
  EXPECT_EQ(c.target_layer_ids, default_target_layer_ids(8, 2));
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"full_attention", "full_attention"}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 5e5);
}

TEST(DrafterConfig, RopeScalingIsReadFromEitherLayoutAndWrittenBackInBoth) {
  auto legacy = tiny_drafter_config_json();  // transformers 4: top-level rope_theta + rope_scaling (`type` key)
  legacy["max_position_embeddings"] = 4096;
  legacy["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1024},
                            {"mscale", 0.5}, {"truncate", false}};
  const DrafterConfig c = parse_drafter_config(legacy, "cfg.json");
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(*c.rope.factor, 4.0);
  EXPECT_EQ(*c.rope.original_max_position_embeddings, 1024);
  EXPECT_FALSE(c.rope.beta_fast.has_value()) << "absent stays absent";
  const auto j = drafter_config_to_json(c);
  const nlohmann::json params = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 4.0},
                                 {"original_max_position_embeddings", 1024}, {"mscale", 0.5}, {"truncate", false}};
  EXPECT_EQ(j["rope_parameters"], params);
  auto scaling = params;
  scaling.erase("rope_theta");
  EXPECT_EQ(j["rope_scaling"], scaling);
  EXPECT_EQ(j["rope_theta"], 10000.0);
  EXPECT_TRUE(parse_drafter_config(j, "exported.json").rope == c.rope);  // both layouts present and agreeing
  auto modern = tiny_drafter_config_json();  // transformers 5: rope_parameters only
  modern.erase("rope_theta");
  modern["max_position_embeddings"] = 4096;
  modern["rope_parameters"] = params;
  EXPECT_TRUE(parse_drafter_config(modern, "cfg.json").rope == c.rope);
  // Unscaled: rope_scaling null, as released drafters write it.
  const auto plain = drafter_config_to_json(parse_drafter_config(tiny_drafter_config_json(), "cfg.json"));
  EXPECT_TRUE(plain["rope_scaling"].is_null());
  EXPECT_EQ(plain["rope_parameters"], (nlohmann::json{{"rope_theta", 10000.0}, {"rope_type", "default"}}));
}

TEST(DrafterConfig, RopeScalingThatWouldBeLostIsRefused) {
  auto j = tiny_drafter_config_json();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"original_max_position_embeddings", 64}};
  EXPECT_NE(error_of(j).find("cfg.json: field 'rope_scaling.original_max_position_embeddings': expected no such key "
                             "for rope_type \"linear\""),
            std::string::npos)
      << error_of(j);
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("cfg.json: field 'rope_scaling.rope_type': expected one of"), std::string::npos);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};  // no max_position_embeddings to scale beyond
  EXPECT_NE(error_of(j).find("field 'max_position_embeddings': expected a positive integer"), std::string::npos);
  DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  c.rope.freq_divisors = {1.0, 2.0};  // a GGUF target's llama3 scaling, copied by drafter_config_for_target
  try {
    c.validate("drafter");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight) have no config.json spelling"), std::string::npos);
  }
}

TEST(DrafterConfig, ErrorsNameFileFieldAndExpectation) {
  auto j = tiny_drafter_config_json();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("cfg.json: field 'hidden_size': expected an integer, got nothing (missing)"), std::string::npos)
      << error_of(j);
  j = tiny_drafter_config_json();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("'num_key_value_heads': expected a divisor of num_attention_heads (4)"), std::string::npos);
  j = tiny_drafter_config_json();
  j["layer_types"] = {"full_attention"};
  EXPECT_NE(error_of(j).find("'layer_types': expected 2 entries"), std::string::npos);
  j = tiny_drafter_config_json();
  j["layer_types"][1] = "linear_attention";
  EXPECT_NE(error_of(j).find("'layer_types[1]'"), std::string::npos);
  j = tiny_drafter_config_json();
  j.erase("sliding_window");
  EXPECT_NE(error_of(j).find("'sliding_window': expected a positive integer"), std::string::npos);
  j = tiny_drafter_config_json();
  j["dflash_config"]["mask_token_id"] = 32;
  EXPECT_NE(error_of(j).find("'dflash_config.mask_token_id': expected a token id in [0, vocab_size=32)"),
            std::string::npos);
  j = tiny_drafter_config_json();
  j["dflash_config"]["target_layer_ids"] = {1, 8};
  EXPECT_NE(error_of(j).find("'dflash_config.target_layer_ids[1]'"), std::string::npos);
  j = tiny_drafter_config_json();
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_NE(error_of(j).find("'architectures': expected [\"DFlashDraftModel\"]"), std::string::npos);
  j = tiny_drafter_config_json();
  j["hidden_size"] = "16";
  EXPECT_NE(error_of(j).find("'hidden_size': expected an integer, got \"16\""), std::string::npos);

  const auto path = temp_file("broken.json");
  std::ofstream(path) << "{\"hidden_size\": 16,";
  try {
    load_drafter_config(path.string());
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": not valid JSON"), std::string::npos);
  }
  fs::remove(path);
  EXPECT_THROW(load_drafter_config("/nonexistent/config.json"), std::invalid_argument);
}

TEST(AnchorSampler, ValidSortedUniqueAndPadded) {
  const int64_t S = 40, N = 12;
  at::Tensor mask = at::zeros({3, S}, at::kBool);
  mask[0].narrow(0, 10, 30).fill_(true);       // many candidates (29)
  mask[1].narrow(0, 5, 4).fill_(true);         // 3 candidates: 5, 6, 7
  mask[1][20] = true;                          // isolated: not a candidate
  mask[2][S - 1] = true;                       // last position: a+1 out of range
  std::mt19937_64 rng(7);
  const AnchorSample s = sample_anchors(mask, N, rng);
  ASSERT_EQ(s.anchors.sizes(), at::IntArrayRef({3, N}));
  const std::vector<int64_t> expected_kept = {N, 3, 0};
  for (int64_t b = 0; b < 3; ++b) {
    int64_t kept = 0, prev = -1;
    for (int64_t i = 0; i < N; ++i) {
      const bool k = s.keep[b][i].item<bool>();
      const int64_t a = s.anchors[b][i].item<int64_t>();
      if (!k) {
        EXPECT_EQ(a, 0);
        continue;
      }
      EXPECT_EQ(i, kept) << "kept blocks come first";
      ++kept;
      EXPECT_TRUE(mask[b][a].item<bool>() && mask[b][a + 1].item<bool>()) << "anchor " << a;
      EXPECT_GT(a, prev) << "sorted, no duplicates";
      prev = a;
    }
    EXPECT_EQ(kept, expected_kept[size_t(b)]);
  }
  EXPECT_TRUE(at::equal(s.anchors[1].narrow(0, 0, 3), at::tensor({5, 6, 7}, at::kLong)));
}

TEST(AnchorSampler, SeededAndCoversEveryCandidate) {
  at::Tensor mask = at::ones({1, 30}, at::kBool);
  std::mt19937_64 a(3), b(3), c(4);
  const auto sa = sample_anchors(mask, 5, a), sb = sample_anchors(mask, 5, b), sc = sample_anchors(mask, 5, c);
  EXPECT_TRUE(at::equal(sa.anchors, sb.anchors));
  EXPECT_FALSE(at::equal(sa.anchors, sc.anchors));
  std::set<int64_t> seen;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200; ++i) {
    const auto s = sample_anchors(mask, 5, rng);
    for (int64_t k = 0; k < 5; ++k) seen.insert(s.anchors[0][k].item<int64_t>());
  }
  EXPECT_EQ(seen.size(), 29u);  // candidates 0..28 (a+1 must exist)
  EXPECT_THROW(sample_anchors(at::ones({30}, at::kBool), 5, rng), std::invalid_argument);
}

TEST(BlockBatch, LabelsAndWeightsByHand) {
  // S = 7, B = 4, gamma = 2. Block 0 at a=1, block 1 at a=4 (runs past the end), block 2 dropped.
  const at::Tensor ids = at::tensor({10, 11, 12, 13, 14, 15, 16}, at::kLong).unsqueeze(0);
  const at::Tensor lm = at::tensor({0, 1, 1, 0, 1, 1, 1}, at::kLong).to(at::kBool).unsqueeze(0);
  const AnchorSample s{at::tensor({1, 4, 2}, at::kLong).unsqueeze(0), at::tensor({1, 1, 0}, at::kLong).to(at::kBool).unsqueeze(0)};
  const BlockBatch bb = build_block_batch(ids, lm, s, 4, 99, 2.0);
  EXPECT_TRUE(at::equal(bb.block_ids[0], at::tensor({11, 99, 99, 99, 14, 99, 99, 99, 12, 99, 99, 99}, at::kLong)));
  // labels: token[a+k] at slot k (same position, no shift); 0 past the end
  EXPECT_TRUE(at::equal(bb.labels[0], at::tensor({11, 12, 13, 14, 14, 15, 16, 0, 12, 13, 14, 15}, at::kLong)));
  const double w1 = 1.0, w2 = std::exp(-0.5), w3 = std::exp(-1.0);
  // block 0: slot1 -> pos 2 (mask 1), slot2 -> pos 3 (mask 0), slot3 -> pos 4 (mask 1)
  // block 1: slot1 -> pos 5, slot2 -> pos 6, slot3 -> pos 7 (past the end); block 2: dropped
  const std::vector<double> want = {0, w1, 0, w3, 0, w1, w2, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(bb.weights[0][int64_t(i)].item<double>(), want[i], 1e-15) << i;
  // teacher rows: the target's last hidden state at a+k-1
  EXPECT_EQ(bb.teacher_index[0][1].item<int64_t>(), 1);
  EXPECT_EQ(bb.teacher_index[0][6].item<int64_t>(), 5);
  EXPECT_NEAR(slot_decay_weights(16, 7.0)[15].item<double>(), std::exp(-14.0 / 7.0), 1e-15);
  EXPECT_EQ(slot_decay_weights(16, 7.0)[0].item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(default_loss_gamma(16), 7.0);
  EXPECT_DOUBLE_EQ(default_loss_gamma(10), 5.0);
  EXPECT_DOUBLE_EQ(default_loss_gamma(8), 4.0);
}

TEST(BlockBatch, NoDecayWeighsEveryKeptLabelOne) {
  // loss_gamma without decay is +inf: exp(-(k-1)/inf) = 1 for every slot k >= 1, slot 0 still 0.
  const double inf = loss_gamma(0, LossDecay::None, 16);
  EXPECT_TRUE(std::isinf(inf) && inf > 0);
  EXPECT_DOUBLE_EQ(loss_gamma(0, LossDecay::Exp, 16), 7.0);  // the paper's, by block size
  EXPECT_DOUBLE_EQ(loss_gamma(3.5, LossDecay::Exp, 16), 3.5);
  const at::Tensor w = slot_decay_weights(16, inf);
  EXPECT_EQ(w[0].item<double>(), 0.0);
  EXPECT_TRUE(at::equal(w.narrow(0, 1, 15), at::ones({15}, at::kDouble)));
  // The by-hand batch of LabelsAndWeightsByHand: the same kept labels, each weighing exactly 1.
  const at::Tensor ids = at::tensor({10, 11, 12, 13, 14, 15, 16}, at::kLong).unsqueeze(0);
  const at::Tensor lm = at::tensor({0, 1, 1, 0, 1, 1, 1}, at::kLong).to(at::kBool).unsqueeze(0);
  const AnchorSample s{at::tensor({1, 4, 2}, at::kLong).unsqueeze(0), at::tensor({1, 1, 0}, at::kLong).to(at::kBool).unsqueeze(0)};
  const BlockBatch bb = build_block_batch(ids, lm, s, 4, 99, inf);
  EXPECT_TRUE(at::equal(bb.weights[0], at::tensor({0., 1., 0., 1., 0., 1., 1., 0., 0., 0., 0., 0.}, at::kDouble)));
}

TEST(DrafterWeights, NamesShapesAndLoadErrors) {
  const DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  const DrafterWeights w = init_drafter_weights(c, at::kFloat, 1);
  const auto named = w.named();
  ASSERT_EQ(named.size(), 3u + 2 * 11);
  EXPECT_EQ(named[0].first, "fc.weight");
  EXPECT_EQ(named[0].second.sizes(), at::IntArrayRef({16, 32}));
  EXPECT_EQ(named[3].first, "layers.0.input_layernorm.weight");
  EXPECT_EQ(named[4].first, "layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(named[4].second.sizes(), at::IntArrayRef({16, 16}));
  EXPECT_EQ(named[6].second.sizes(), at::IntArrayRef({8, 16}));  // v_proj: 2 kv heads x 4

  // safetensors round trip in bf16 and fp32
  const auto path = temp_file("model.safetensors").string();
  for (auto dt : {at::kBFloat16, at::kFloat}) {
    save_drafter_weights(path, w, dt);
    const DrafterWeights back = load_drafter_weights(c, path, at::kFloat);
    for (size_t i = 0; i < named.size(); ++i)
      EXPECT_TRUE(at::allclose(back.named()[i].second, named[i].second.to(dt).to(at::kFloat))) << named[i].first;
  }
  // a config with more layers than the file: the missing tensor is named
  DrafterConfig c3 = c;
  c3.num_hidden_layers = 3;
  c3.layer_types.push_back("full_attention");
  try {
    load_drafter_weights(c3, path, at::kFloat);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": tensor 'layers.2.input_layernorm.weight' is missing"), std::string::npos)
        << e.what();
  }
  // a config with a different width: the shape mismatch is named
  DrafterConfig cw = c;
  cw.intermediate_size = 20;
  try {
    load_drafter_weights(cw, path, at::kFloat);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.0.mlp.gate_proj.weight' has shape [24, 16], expected [20, 16]"),
              std::string::npos) << e.what();
  }
  // a truncated file is refused by the reader with the path in the message
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 10);
  try {
    load_drafter_weights(c, path, at::kFloat);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  fs::remove(path);
  // unexpected extra tensors (e.g. an embedding) are rejected
  std::map<std::string, at::Tensor> m;
  std::vector<std::string> names;
  for (auto& [n, t] : named) {
    m[n] = t;
    names.push_back(n);
  }
  names.push_back("embed_tokens.weight");
  m["embed_tokens.weight"] = at::zeros({32, 16});
  EXPECT_THROW(drafter_weights_from(c, names, [&](const std::string& n) { return m.at(n); }, at::kFloat, "mem"),
               std::invalid_argument);
}

TEST(DrafterWeights, FinalNormStartsAtItsOwnValue) {
  // Only the final norm (the one in front of the tied LM head) takes final_norm; the other norms stay at 1.
  const DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  const DrafterWeights w = init_drafter_weights(c, at::kFloat, 1, 0.02, 0.0, 0.3);
  for (const auto& [name, t] : w.named()) {
    if (t.dim() != 1) continue;
    const double expected = name == "norm.weight" ? 0.3 : 1.0;
    EXPECT_TRUE(at::allclose(t, at::full_like(t, expected))) << name;
  }
}

TEST(CheckpointPolicy, Parses) {
  EXPECT_EQ(CheckpointPolicy::parse("none").every, 0);
  EXPECT_EQ(CheckpointPolicy::parse("layer").every, 1);
  EXPECT_EQ(CheckpointPolicy::parse("every:3").every, 3);
  EXPECT_TRUE(CheckpointPolicy{2}.applies(0));
  EXPECT_FALSE(CheckpointPolicy{2}.applies(1));
  EXPECT_FALSE(CheckpointPolicy{0}.applies(0));
  EXPECT_THROW(CheckpointPolicy::parse("sometimes"), std::invalid_argument);
  // "every:0" is no spelling of "none" (issue 19): an error, as are signs.
  EXPECT_THROW(CheckpointPolicy::parse("every:0"), std::invalid_argument);
  EXPECT_THROW(CheckpointPolicy::parse("every:-2"), std::invalid_argument);
  EXPECT_THROW(CheckpointPolicy::parse("+2"), std::invalid_argument);
  EXPECT_EQ(CheckpointPolicy::parse("0").every, 0);
}

TEST(DrafterConfig, RepeatedTargetLayersAndHugeOrNonFiniteValuesAreErrors) {
  auto error_of = [](const nlohmann::json& j) {
    try {
      parse_drafter_config(j, "cfg.json");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json j = tiny_drafter_config_json();
  j["dflash_config"]["target_layer_ids"] = {1, 1};
  j["num_hidden_layers"] = 2;
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_NE(error_of(j).find("'dflash_config.target_layer_ids[1]': expected a layer not listed before (each target "
                             "layer once), got 1 (also at index 0)"),
            std::string::npos)
      << error_of(j);
  j = tiny_drafter_config_json();
  j["num_hidden_layers"] = nlohmann::json::parse("18446744073709551615");  // used to read as -1
  EXPECT_NE(error_of(j).find("'num_hidden_layers': expected an integer in [-2147483648, 2147483647], got "
                             "18446744073709551615"),
            std::string::npos)
      << error_of(j);
  DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  c.rope.theta = std::numeric_limits<double>::infinity();
  try {
    c.validate("cfg.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'rope_theta': expected a finite number in (1, 1000000000000], got inf"), std::string::npos)
        << e.what();
  }
}

TEST(DrafterModel, SequenceWithoutAnchorsGivesZeroLossAndZeroGradients) {
  const DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  DrafterWeights w = init_drafter_weights(c, at::kDouble, 2, 0.1, 0.1);
  w.set_requires_grad(true);
  at::manual_seed(1);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  FrozenTarget t{at::randn({32, 16}, opts), at::Tensor()};
  t.lm_head = t.embed;
  const int64_t S = 9;
  const at::Tensor ids = at::randint(0, 30, {1, S}, at::kLong);
  const at::Tensor loss_mask = at::zeros({1, S}, at::kBool);  // a prompt only: no anchor is valid
  std::mt19937_64 rng(0);
  const AnchorSample s = sample_anchors(loss_mask, 3, rng);
  EXPECT_FALSE(s.keep.any().item<bool>());
  DrafterLossOptions opt;
  opt.gamma = 4;
  opt.chunk.kl_weight = 0.15;
  const BlockBatch bb = build_block_batch(ids, loss_mask, s, c.block_size, c.mask_token_id, opt.gamma);
  const auto r = drafter_loss(c, w, t, at::randn({1, S, 32}, opts), at::randn({1, S, 16}, opts), s, bb, opt,
                              CheckpointPolicy{1});
  r.loss.backward();
  EXPECT_EQ(r.loss.item<double>(), 0.0);
  EXPECT_EQ(r.slot_count.sum().item<double>(), 0.0);
  for (auto& [n, p] : w.named())
    if (p.grad().defined()) EXPECT_EQ(p.grad().abs().max().item<double>(), 0.0) << n;
}
