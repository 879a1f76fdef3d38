// Self-consistency of the Qwen3.5-style hybrid target on random tiny models (float64): the chunked prefill,
// token-by-token decode (recurrent form), block verification with rollback to every accepted prefix, pipeline
// stages and ragged batched decode all reproduce the plain full forward; rollback limits, its memory, weight
// and config errors. (Agreement with Hugging Face is tested in tests/python/test_target_qwen3_5.py.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "target_config.h"
#include "target_model.h"
#include "tiny_target.h"

using namespace dflash::models;
using namespace dflash::models::tiny;

namespace {

TargetModel hybrid_model(uint64_t seed, TargetLoadOptions opts = {}) {
  opts.dtype = at::kDouble;
  return make_model(tiny_hybrid_config(), random_hybrid_weights(tiny_hybrid_config(), seed), opts);
}

constexpr double kTol = 1e-10;

}  // namespace

TEST(HybridTarget, ChunkedPrefillEqualsTokenByTokenDecode) {
  TargetModel m = hybrid_model(1);
  const TargetConfig& c = m.config();
  // 150 tokens: the prefill runs three chunks of 64 (the last one padded).
  at::Tensor ids = at::randint(0, c.vocab_size, {2, 150}, at::kLong);
  TargetOutput full = m.forward(ids, nullptr, {0, 2, 4}, true, true);
  KVCache cache = m.make_cache(2, 150);
  std::vector<at::Tensor> h0, h2, last;
  TargetOutput pre = m.forward(ids.narrow(1, 0, 110), &cache, {0, 2}, false, true);
  h0.push_back(pre.hidden.at(0)), h2.push_back(pre.hidden.at(2)), last.push_back(pre.last_hidden);
  for (int64_t t = 110; t < 150; ++t) {
    TargetOutput o = m.forward(ids.narrow(1, t, 1), &cache, {0, 2}, false, true);
    h0.push_back(o.hidden.at(0)), h2.push_back(o.hidden.at(2)), last.push_back(o.last_hidden);
  }
  EXPECT_EQ(cache.length(), 150);
  EXPECT_LT(max_diff(at::cat(h0, 1), full.hidden.at(0)), kTol);  // a DeltaNet layer
  EXPECT_LT(max_diff(at::cat(h2, 1), full.hidden.at(2)), kTol);  // an attention layer
  EXPECT_LT(max_diff(at::cat(last, 1), full.last_hidden), kTol);
  EXPECT_EQ(max_diff(full.hidden.at(4), full.last_hidden), 0.0);  // HF: the last layer is final-normed
}

TEST(HybridTarget, VerifyThenRollBackToEveryAcceptedPrefix) {
  TargetModel m = hybrid_model(2);
  const TargetConfig& c = m.config();
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 24}, at::kLong);
  TargetOutput full = m.forward(ids, nullptr, {1, 3}, false, true);
  const int64_t P = 9, B = 6;
  for (int64_t k = 0; k <= B; ++k) {  // accept k of the B verified tokens
    KVCache cache = m.make_cache(1, 24 + B);
    m.forward(ids.narrow(1, 0, P), &cache, {}, false, false);
    // The block: the true tokens up to k, junk after.
    at::Tensor block = ids.narrow(1, P, B).clone();
    if (k < B) block.narrow(1, k, B - k).add_(5).remainder_(c.vocab_size);
    TargetOutput ver = m.forward(block, &cache, {1, 3}, false, true);
    if (k > 0) EXPECT_LT(max_diff(ver.last_hidden.narrow(1, 0, k), full.last_hidden.narrow(1, P, k)), kTol);
    cache.crop(P + k);
    EXPECT_EQ(cache.length(), P + k);
    TargetOutput rest = m.forward(ids.narrow(1, P + k, 24 - P - k), &cache, {1, 3}, false, true);
    EXPECT_LT(max_diff(rest.last_hidden, full.last_hidden.narrow(1, P + k, 24 - P - k)), kTol) << "k=" << k;
    EXPECT_LT(max_diff(rest.hidden.at(1), full.hidden.at(1).narrow(1, P + k, 24 - P - k)), kTol) << "k=" << k;
  }
}

TEST(HybridTarget, RollbackLimitsAndMemory) {
  TargetModel m = hybrid_model(3);
  const TargetConfig& c = m.config();
  at::Tensor ids = at::randint(0, c.vocab_size, {1, 100}, at::kLong);
  KVCache cache = m.make_cache(1, 100);
  EXPECT_EQ(cache.rollback_bytes(), 0);
  const LinearAttentionConfig& lc = c.linear;
  const int64_t n_lin = c.num_linear_layers();  // 3
  const int64_t state = lc.conv_dim() * (lc.conv_kernel - 1) + lc.num_value_heads * lc.key_head_dim * lc.value_head_dim;
  EXPECT_EQ(cache.linear_state_bytes(), n_lin * state * 8);
  m.forward(ids.narrow(1, 0, 10), &cache, {}, false, false);
  const int64_t B = 4;
  m.forward(ids.narrow(1, 10, B), &cache, {}, false, false);
  // Start states + per token: conv inputs, k (q/k heads), v, g, beta; float64 here.
  const int64_t per_token = lc.conv_dim() + lc.key_dim() + lc.value_dim() + 2 * lc.num_value_heads;
  EXPECT_EQ(cache.rollback_bytes(), n_lin * (state + B * per_token) * 8);
  // Before the start of the last forward: refused, and the cache is unchanged.
  try {
    cache.crop(9);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("inside the last forward"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 14);
  cache.crop(12);
  cache.crop(10);  // two crops inside the same forward
  TargetOutput a = m.forward(ids.narrow(1, 10, 20), &cache, {}, false, true);
  TargetOutput ref = m.forward(ids.narrow(1, 0, 30), nullptr, {}, false, true);
  EXPECT_LT(max_diff(a.last_hidden, ref.last_hidden.narrow(1, 10, 20)), kTol);
  // A forward longer than kRollbackTokens keeps no per-token record: back to its start is still possible.
  cache.crop(0);
  m.forward(ids.narrow(1, 0, kRollbackTokens + 1), &cache, {}, false, false);
  EXPECT_THROW(cache.crop(3), std::invalid_argument);
  cache.crop(0);
  EXPECT_EQ(cache.linear_state_bytes(), n_lin * state * 8);
  TargetOutput fresh = m.forward(ids.narrow(1, 0, 30), &cache, {}, false, true);
  EXPECT_LT(max_diff(fresh.last_hidden, ref.last_hidden), kTol);
}

TEST(HybridTarget, PipelineStagesAndBatchedDecode) {
  TargetLoadOptions opts;
  opts.stages = split_layers(5, {at::Device(at::kCPU), at::Device(at::kCPU)});
  TargetModel one = hybrid_model(4), two = hybrid_model(4, opts);
  const TargetConfig& c = one.config();
  at::Tensor ids = at::randint(0, c.vocab_size, {3, 20}, at::kLong);
  TargetOutput a = one.forward(ids, nullptr, {0, 1, 2, 3, 4}, true, true);
  TargetOutput b = two.forward(ids, nullptr, {0, 1, 2, 3, 4}, true, true);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(max_diff(a.hidden.at(i), b.hidden.at(i)), 0.0);
  // Ragged decode: three sequences with prompts of 5, 9 and 13 tokens advance together for 7 steps.
  std::vector<KVCache> caches;
  std::vector<KVCache*> ptrs;
  const std::vector<int64_t> P = {5, 9, 13};
  for (int64_t s = 0; s < 3; ++s) {
    caches.push_back(two.make_cache(1, 20));
    two.forward(ids.narrow(0, s, 1).narrow(1, 0, P[size_t(s)]), &caches.back(), {}, false, false);
  }
  for (auto& k : caches) ptrs.push_back(&k);
  for (int64_t step = 0; step < 7; ++step) {
    std::vector<int64_t> tok;
    for (int64_t s = 0; s < 3; ++s) tok.push_back(ids[s][P[size_t(s)] + step].item<int64_t>());
    std::map<int, at::Tensor> hidden;
    at::Tensor logits = two.decode_batch(tok, ptrs, true, {1, 2}, &hidden);
    for (int64_t s = 0; s < 3; ++s) {
      const int64_t pos = P[size_t(s)] + step;
      EXPECT_LT(max_diff(logits[s], a.logits[s][pos]), 1e-5);  // logits are float32
      EXPECT_LT(max_diff(hidden.at(1)[s], a.hidden.at(1)[s][pos]), kTol);
      EXPECT_LT(max_diff(hidden.at(2)[s], a.hidden.at(2)[s][pos]), kTol);
    }
  }
  // Batched decode keeps nothing to roll back (its callers never crop): only 0 or the full length.
  EXPECT_EQ(caches[0].rollback_bytes(), 0);
  EXPECT_THROW(caches[0].crop(caches[0].length() - 1), std::invalid_argument);
  caches[0].crop(0);
}

TEST(HybridTarget, GreedyGenerateAndBf16) {
  TargetModel m = hybrid_model(5);
  std::vector<int64_t> seq = {5, 17, 3};
  std::vector<int64_t> gen = m.generate(seq, 8, {});
  ASSERT_EQ(gen.size(), 8u);
  for (int64_t t : gen) {
    at::Tensor ids = at::tensor(seq, at::kLong).view({1, -1});
    EXPECT_EQ(t, m.forward(ids, nullptr, {}, true, false).logits[0][-1].argmax().item<int64_t>());
    seq.push_back(t);
  }
  TargetLoadOptions bf;
  bf.dtype = at::kBFloat16;
  TargetModel low = make_model(tiny_hybrid_config(), random_hybrid_weights(tiny_hybrid_config(), 5), bf);
  at::Tensor ids = at::randint(0, 97, {1, 30}, at::kLong);
  at::Tensor ref = m.forward(ids, nullptr, {}, true, false).logits;
  KVCache cache = low.make_cache(1, 30);
  low.forward(ids.narrow(1, 0, 20), &cache, {}, false, false);
  at::Tensor got = low.forward(ids.narrow(1, 20, 10), &cache, {}, true, false).logits;
  EXPECT_LT(max_diff(got, ref.narrow(1, 20, 10)), 0.05 * ref.abs().max().item<double>());
}

TEST(HybridTarget, CacheOfAnotherModelIsRefused) {
  TargetModel m = hybrid_model(8);
  TargetConfig lc = tiny_config("qwen3");
  lc.num_hidden_layers = 5;
  TargetModel dense = make_model(lc, random_weights(lc, 8));
  KVCache other = dense.make_cache(1, 8);
  at::Tensor ids = at::randint(0, 97, {1, 3}, at::kLong);
  try {
    m.forward(ids, &other, {}, false, false);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 holds keys and values"), std::string::npos) << e.what();
  }
  KVCache mine = m.make_cache(1, 8);
  EXPECT_THROW(dense.decode_batch({1}, {&mine}), std::invalid_argument);
}

TEST(HybridTarget, LayerWeightsForADrafterStart) {
  TargetConfig c = tiny_hybrid_config();
  auto w = random_hybrid_weights(c, 6);
  TargetModel m = make_model(c, w);
  auto lin = m.layer_weights(0);
  EXPECT_EQ(lin.count("self_attn.q_proj.weight"), 0u);
  EXPECT_EQ(max_diff(lin.at("input_layernorm.weight"), 1 + w.at("model.layers.0.input_layernorm.weight")), 0.0);
  auto att = m.layer_weights(2);
  const at::Tensor q = w.at("model.layers.2.self_attn.q_proj.weight").view({4, 32, 32}).narrow(1, 0, 16);
  EXPECT_EQ(max_diff(att.at("self_attn.q_proj.weight"), q.reshape({64, 32})), 0.0);
  EXPECT_EQ(max_diff(att.at("self_attn.k_norm.weight"), 1 + w.at("model.layers.2.self_attn.k_norm.weight")), 0.0);
}

TEST(HybridTarget, MissingAndMisshapenTensorsAreClearErrors) {
  TargetConfig c = tiny_hybrid_config();
  auto w = random_hybrid_weights(c, 7);
  auto error = [&](const std::map<std::string, at::Tensor>& weights) {
    try {
      make_model(c, weights);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto missing = w;
  missing.erase("model.layers.3.linear_attn.A_log");
  EXPECT_NE(error(missing).find("missing tensor 'model.layers.3.linear_attn.A_log'"), std::string::npos);
  auto bad = w;
  bad["model.layers.0.linear_attn.conv1d.weight"] = at::zeros({40, 4});
  EXPECT_NE(error(bad).find("'model.layers.0.linear_attn.conv1d.weight' has shape [40, 4], expected [56, 1, 4]"),
            std::string::npos)
      << error(bad);
  auto no_gate = w;  // q_proj without the output-gate half
  no_gate["model.layers.2.self_attn.q_proj.weight"] = at::zeros({64, 32});
  EXPECT_NE(error(no_gate).find("expected [128, 32]"), std::string::npos) << error(no_gate);
  // A multimodal checkpoint's prefix is found even when the config does not say so.
  std::map<std::string, at::Tensor> nested;
  for (const auto& [k, v] : w)
    nested[k.rfind("model.", 0) == 0 ? "model.language_model." + k.substr(6) : k] = v;
  nested["model.visual.blocks.0.attn.qkv.weight"] = at::zeros({3, 3});
  TargetModel a = make_model(c, w), b = make_model(c, nested);
  at::Tensor ids = at::randint(0, 97, {1, 7}, at::kLong);
  EXPECT_EQ(max_diff(a.forward(ids, nullptr, {}, true, false).logits, b.forward(ids, nullptr, {}, true, false).logits),
            0.0);
}

TEST(HybridConfig, ParsesBothLayoutsAndRejectsBadFields) {
  const std::string text = R"({"model_type":"qwen3_5_text","vocab_size":100,"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":8,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
    "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":8,
    "linear_conv_kernel_dim":4,"rope_parameters":{"rope_theta":1e7,"rope_type":"default",
    "partial_rotary_factor":0.25,"mrope_section":[11,11,10],"mrope_interleaved":true},"eos_token_id":7})";
  TargetConfig c = parse_target_config(text, "t");
  EXPECT_TRUE(c.info().hybrid);
  EXPECT_EQ(c.arch, TargetArch::qwen3_5);
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_EQ(c.num_linear_layers(), 6);  // full_attention_interval defaults to 4: layers 3 and 7 are attention
  EXPECT_FALSE(c.is_linear_layer(3));
  EXPECT_TRUE(c.is_linear_layer(4));
  EXPECT_EQ(c.linear.conv_dim(), 2 * 32 + 32);
  EXPECT_TRUE(c.notes.empty());

  const std::string nested = R"({"model_type":"qwen3_5","architectures":["Qwen3_5ForConditionalGeneration"],
    "tie_word_embeddings":true,"vision_config":{"depth":2},"text_config":)" +
                             text.substr(0, text.size() - 1) + R"(,"tie_word_embeddings":false,"mtp_num_hidden_layers":1,
    "layer_types":["linear_attention","full_attention","linear_attention","linear_attention","linear_attention",
    "linear_attention","full_attention","linear_attention"]}})";
  TargetConfig n = parse_target_config(nested, "n");
  EXPECT_EQ(n.weight_prefix, "model.language_model.");
  EXPECT_TRUE(n.tie_word_embeddings);  // the composite config's flag decides, as in transformers
  EXPECT_FALSE(n.is_linear_layer(1));
  EXPECT_EQ(n.notes.size(), 2u);  // vision tower and MTP head are ignored, with a note

  auto error = [](const std::string& json) {
    try {
      parse_target_config(json, "cfg");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto edit = [&](const std::string& base, const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return error(s);
  };
  EXPECT_NE(edit(nested, "\"full_attention\",\"linear_attention\",\"linear_attention\"",
                 "\"mamba\",\"linear_attention\",\"linear_attention\"")
                .find("field 'layer_types[1]' is \"mamba\""),
            std::string::npos);
  EXPECT_NE(edit(text, "\"eos_token_id\":7", "\"eos_token_id\":7,\"layer_types\":[\"linear_attention\"]")
                .find("'layer_types' has 1 entries, expected 8"),
            std::string::npos);
  EXPECT_NE(edit(text, "\"eos_token_id\":7", "\"eos_token_id\":7,\"attn_output_gate\":false").find("attn_output_gate"),
            std::string::npos);
  EXPECT_NE(edit(text, "\"linear_num_value_heads\":4", "\"linear_num_value_heads\":3").find("linear_num_key_heads"),
            std::string::npos);
  EXPECT_NE(edit(text, "\"rope_type\":\"default\"", "\"rope_type\":\"longrope\"")
                .find("field 'rope_parameters.rope_type': expected one of \"default\", \"linear\", \"dynamic\", \"yarn\", "
                      "\"llama3\""),
            std::string::npos);
  EXPECT_NE(error(R"({"model_type":"qwen3_5","vision_config":{}})").find("missing field 'text_config'"),
            std::string::npos);
  EXPECT_NE(edit(nested, "\"model_type\":\"qwen3_5_text\"", "\"model_type\":\"qwen3_5_moe_text\"").find("text_config"),
            std::string::npos);
  EXPECT_NE(edit(text, "\"qwen3_5_text\"", "\"falcon_h1\"").find("'model_type' is 'falcon_h1'"), std::string::npos);
}
