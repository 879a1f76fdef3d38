// A target config's cost from its kinds of layers (target_cost.h) against the per-layer sums it replaces, on a
// hybrid MoE target whose four kinds of layers all occur; and the limits a config may claim (target_limits.h):
// a config of 2^31 - 1 layers is refused at once instead of being planned for minutes (issue 36).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "error_of.h"
#include "target_config.h"
#include "target_cost.h"
#include "target_limits.h"

using namespace dflash::models;

namespace {

// 13 layers: DeltaNet except every 4th; MoE on odd layers (decoder_sparse_step 2) except 5 and 7 (mlp_only_layers).
TargetConfig mixed_target() {
  TargetConfig c;
  c.arch = TargetArch::qwen3_5_moe;
  c.vocab_size = 300;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 13;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerType::full_attention : LayerType::linear_attention);
  c.linear = {4, 8, 8, 2, 4};
  c.partial_rotary_factor = 0.5;
  c.moe.num_experts = 6;
  c.moe.top_k = 2;
  c.moe.expert_intermediate = 16;
  c.moe.sparse_step = 2;
  c.moe.mlp_only_layers = {5, 7};
  c.moe.shared_intermediate = 24;
  c.finish();
  c.validate("mixed");
  return c;
}

}  // namespace

TEST(TargetCost, KindCountsAndRangeSumsEqualThePerLayerSums) {
  const TargetConfig c = mixed_target();
  const LayerKinds kinds(c);
  const int64_t L = c.num_hidden_layers;
  int seen[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b <= L; ++b)
    for (int64_t e = b; e <= L; ++e) {
      std::array<int64_t, LayerKinds::kKinds> want{};
      TargetFlops f;
      for (int64_t i = b; i < e; ++i) {
        ++want[size_t(LayerKinds::index(c.is_linear_layer(i), c.is_moe_layer(i), c.window_of(i) > 0))];
        const TargetFlops l = target_layer_forward_flops(c, i, 40);
        f.linear += l.linear, f.attention += l.attention, f.deltanet += l.deltanet;
      }
      EXPECT_EQ(kinds.count(b, e), want) << b << ".." << e;
      const TargetFlops got = target_range_forward_flops(c, kinds, b, e, 40);
      EXPECT_DOUBLE_EQ(got.linear, f.linear);
      EXPECT_DOUBLE_EQ(got.attention, f.attention);
      EXPECT_DOUBLE_EQ(got.deltanet, f.deltanet);
      if (b == 0 && e == L)
        for (int k = 0; k < 4; ++k) seen[k] = int(want[size_t(k)]);
    }
  for (int k = 0; k < 4; ++k) EXPECT_GT(seen[k], 0) << "kind " << k << " does not occur: the test would not cover it";
  int64_t params = c.vocab_size * c.hidden_size * 2 + c.hidden_size;
  for (int64_t i = 0; i < L; ++i) params += target_layer_params(c, i);
  EXPECT_EQ(target_params(c), params);
  // Stage weights: the per-layer parameters of each stage's layers, embedding first, norm and head last.
  for (int64_t P = 1; P <= L; ++P) {
    const auto stages = target_stage_memory(c, kinds, 2, P, 40, {0, 7});
    ASSERT_EQ(int64_t(stages.size()), P);
    for (int64_t s = 0; s < P; ++s) {
      double w = 0;
      for (int64_t i = L * s / P; i < L * (s + 1) / P; ++i) w += 2.0 * double(target_layer_params(c, i));
      if (s == 0) w += 2.0 * 300 * 32;
      if (s == P - 1) w += 2.0 * 32 + 2.0 * 300 * 32;
      EXPECT_DOUBLE_EQ(stages[size_t(s)].weights, w) << P << " stages, stage " << s;
    }
  }
}

TEST(TargetCost, HasDenseMlpInClosedFormAgreesWithTheLayers) {
  TargetConfig c = mixed_target();
  for (int64_t step : {1, 2, 3})
    for (bool listed : {false, true}) {
      c.moe.sparse_step = step;
      c.moe.mlp_only_layers = listed ? std::vector<int64_t>{5} : std::vector<int64_t>{};
      c.finish();
      bool any = false;
      for (int64_t i = 0; i < c.num_hidden_layers; ++i) any = any || !c.is_moe_layer(i);
      EXPECT_EQ(c.has_dense_mlp(), any) << "step " << step << " listed " << listed;
    }
}

TEST(TargetLimits, AbsurdSizesAreRefusedAtOnceNamingFieldValueAndLimit) {
  const std::string base = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                               "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": LAYERS})";
  auto with_layers = [&](const std::string& n) { return std::string(base).replace(base.find("LAYERS"), 6, n); };
  EXPECT_EQ(error_of([&] { parse_target_config(with_layers("65536"), "'ok.json'"); }), "");
  EXPECT_EQ(error_of([&] { parse_target_config(with_layers("2147483647"), "'c.json'"); }),
            "target config 'c.json': field 'num_hidden_layers' is 2147483647, above the limit 65536 (released models "
            "have a few hundred)");
  // A hybrid's layer list is built from the count: refused before one entry is made (it used to allocate 2^31).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string hybrid = R"({"model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 16,
      "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
      "num_hidden_layers": 2147483647})";
  EXPECT_NE(error_of([&] { parse_target_config(hybrid, "'h.json'"); }).find("'num_hidden_layers' is 2147483647, above the limit 65536"),
            std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  TargetConfig c = mixed_target();
  c.hidden_size = kMaxTargetHidden + 1;
  EXPECT_NE(error_of([&] { c.validate("'x'"); }).find("field 'hidden_size' is 1048577, above the limit 1048576"),
            std::string::npos);
  c = mixed_target();
  c.moe.num_experts = 70000;
  EXPECT_NE(error_of([&] { c.validate("'x'"); }).find("field 'num_experts' is 70000, above the limit 65536"),
            std::string::npos);
  // Each field within its limit, together beyond any memory: 65536 layers of 2^20 x 2^24 MLPs.
  c = mixed_target();
  c.arch = TargetArch::qwen3;
  c.layer_types.clear();
  c.moe = MoeConfig{};
  c.num_hidden_layers = kMaxTargetLayers;
  c.hidden_size = kMaxTargetHidden;
  c.intermediate_size = kMaxTargetIntermediate;
  c.num_attention_heads = 8192;
  c.num_key_value_heads = 8192;
  c.head_dim = 128;
  EXPECT_NE(error_of([&] { c.validate("'x'"); }).find("parameters, above the limit 1e15"), std::string::npos);
}
