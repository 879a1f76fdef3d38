// Each target architecture's config.json parses to its TargetArch and to the kinds of layers it implies (mixer,
// MLP, window, sinks); an unknown model_type lists the supported spellings; the architecture table has one row
// per enum value; a config built in code must compute its layer kinds (finish) before it is used; what a row says
// (an expert's width field) is what the shared checks use.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "error_of.h"
#include "target_config.h"

using namespace dflash::models;

namespace {

// A small config.json of `type` with `extra` fields ("\"k\": v, ..." or empty) added.
std::string config_json(const std::string& type, const std::string& extra) {
  return R"({"model_type": ")" + type + R"(", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

const LayerKind kAttention{};  // full attention, dense MLP, no sinks

LayerKind kind(Mixer mixer, Mlp mlp, int64_t window = 0, bool sinks = false) { return {mixer, mlp, window, sinks}; }

std::string shown(const std::vector<LayerKind>& layers) {
  std::string s;
  for (const LayerKind& k : layers)
    s += std::string(k.mixer == Mixer::deltanet ? "deltanet" : "attention") + "/" +
         (k.mlp == Mlp::moe ? "moe" : "dense") + "/w" + std::to_string(k.window) + (k.sinks ? "/sinks " : " ");
  return s;
}

struct Case {
  std::string name, json;
  TargetArch arch;
  std::vector<LayerKind> layers;
};

std::vector<Case> cases() {
  const Mixer A = Mixer::attention, DN = Mixer::deltanet;
  const Mlp dense = Mlp::dense, moe = Mlp::moe;
  const std::string experts = R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8)";
  const std::string hybrid_text = config_json("qwen3_5_text", "");  // full_attention_interval 4: layer 3 attends
  return {
      {"llama", config_json("llama", ""), TargetArch::llama, std::vector<LayerKind>(4, kAttention)},
      {"qwen3", config_json("qwen3", ""), TargetArch::qwen3, std::vector<LayerKind>(4, kAttention)},
      // decoder_sparse_step 2 routes layers 1 and 3; mlp_only_layers keeps 3 dense
      {"qwen3_moe", config_json("qwen3_moe", experts + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [3])"),
       TargetArch::qwen3_moe, {kAttention, kind(A, moe), kAttention, kAttention}},
      {"qwen3_5_text", hybrid_text, TargetArch::qwen3_5,
       {kind(DN, dense), kind(DN, dense), kind(DN, dense), kAttention}},
      {"qwen3_5 (nested)", R"({"model_type": "qwen3_5", "text_config": )" + hybrid_text + "}", TargetArch::qwen3_5,
       {kind(DN, dense), kind(DN, dense), kind(DN, dense), kAttention}},
      {"qwen3_5_moe_text",
       config_json("qwen3_5_moe_text", experts + R"(, "shared_expert_intermediate_size": 8,
         "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"])"),
       TargetArch::qwen3_5_moe, {kind(DN, moe), kind(A, moe), kind(DN, moe), kind(A, moe)}},
      // GptOssConfig's default layer_types: even layers slide
      {"gpt_oss", config_json("gpt_oss", R"("num_local_experts": 4, "sliding_window": 8)"), TargetArch::gpt_oss,
       {kind(A, moe, 8, true), kind(A, moe, 0, true), kind(A, moe, 8, true), kind(A, moe, 0, true)}},
  };
}

}  // namespace

TEST(TargetArch, EachArchitectureParsesToItsEnumAndLayerKinds) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const TargetConfig t = parse_target_config(c.json, "'" + c.name + ".json'");
    EXPECT_EQ(t.arch, c.arch);
    EXPECT_EQ(shown(t.layers), shown(c.layers));
    ASSERT_EQ(int64_t(t.layers.size()), t.num_hidden_layers);
    for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
      EXPECT_EQ(t.is_linear_layer(i), c.layers[size_t(i)].mixer == Mixer::deltanet) << i;
      EXPECT_EQ(t.is_moe_layer(i), c.layers[size_t(i)].mlp == Mlp::moe) << i;
      EXPECT_EQ(t.window_of(i), c.layers[size_t(i)].window) << i;
    }
  }
}

TEST(TargetArch, UnknownModelTypeListsTheSupportedOnes) {
  EXPECT_EQ(error_of([] { parse_target_config(config_json("mamba", ""), "'m.json'"); }),
            "target config 'm.json': field 'model_type' is 'mamba' (supported: llama, qwen3, qwen3_moe, qwen3_5, "
            "qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, gpt_oss)");
  EXPECT_EQ(error_of([] { parse_target_config(R"({"vocab_size": 64})", "'n.json'"); }),
            "target config 'n.json': missing field 'model_type' (expected one of: llama, qwen3, qwen3_moe, qwen3_5, "
            "qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, gpt_oss)");
}

TEST(TargetArch, TheTableHasOneRowPerArchitectureInEnumOrder) {
  const auto& rows = target_archs();
#define DFLASH_COUNT_ARCH(name) +1
  ASSERT_EQ(rows.size(), size_t(0 DFLASH_TARGET_ARCHS(DFLASH_COUNT_ARCH)));  // one per line of arch/arch_list.h
#undef DFLASH_COUNT_ARCH
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(size_t(rows[i].arch), i);
    EXPECT_EQ(&target_arch_info(rows[i].arch), &rows[i]);
    ASSERT_FALSE(rows[i].model_types.empty()) << rows[i].name;
    EXPECT_EQ(std::string(rows[i].name), rows[i].model_types.front());  // the name is a spelling config.json uses
  }
}

TEST(TargetArch, LayerTypesAreCheckedAgainstTheArchitecture) {
  // a hybrid has no sliding layers, gpt-oss no DeltaNet ones, a dense Llama neither (typed values, same messages)
  EXPECT_NE(error_of([] {
              parse_target_config(config_json("gpt_oss", R"("num_local_experts": 4,
                "layer_types": ["sliding_attention", "linear_attention", "full_attention", "full_attention"])"),
                                  "'g.json'");
            }).find("field 'layer_types[1]' is \"linear_attention\" (supported: \"sliding_attention\", "
                    "\"full_attention\")"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_target_config(config_json("qwen3_5_text", R"("layer_types": ["linear_attention",
                "sliding_attention", "linear_attention", "full_attention"])"),
                                  "'h.json'");
            }).find("field 'layer_types[1]' is \"sliding_attention\" (supported: \"linear_attention\", "
                    "\"full_attention\")"),
            std::string::npos);
  TargetConfig c = parse_target_config(config_json("llama", ""), "'l.json'");
  c.layer_types = std::vector<LayerType>(4, LayerType::full_attention);
  c.layer_types[2] = LayerType::sliding_attention;
  c.finish();
  EXPECT_NE(error_of([&] { c.validate("'l'"); }).find("field 'layer_types[2]' is \"sliding_attention\""),
            std::string::npos);
}

TEST(TargetArch, ConfigBuiltInCodeNeedsItsLayerKinds) {
  TargetConfig c = parse_target_config(config_json("qwen3", ""), "'q.json'");
  c.num_hidden_layers = 6;  // changed after parsing: the kinds no longer cover every layer
  EXPECT_NE(error_of([&] { c.validate("'q'"); }).find("its layer kinds cover 4 layers, expected 6"), std::string::npos);
  c.finish();
  EXPECT_EQ(error_of([&] { c.validate("'q'"); }), "");
  EXPECT_EQ(c.layers, std::vector<LayerKind>(6, kAttention));
}

TEST(TargetArch, AnExpertWidthErrorNamesTheFieldItsArchitectureReads) {
  // gpt-oss's experts are intermediate_size wide, the Qwen MoEs' moe_intermediate_size: each row says which
  // (TargetArchInfo::expert_width_key), and validate names that field.
  const std::string qwen_experts = R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {config_json("gpt_oss", R"("num_local_experts": 4)"), "intermediate_size"},
      {config_json("qwen3_moe", qwen_experts), "moe_intermediate_size"},
      {config_json("qwen3_5_moe_text", qwen_experts + R"(, "shared_expert_intermediate_size": 8)"), "moe_intermediate_size"}};
  for (const auto& [json, field] : cases) {
    TargetConfig c = parse_target_config(json, "'m.json'");
    c.moe.expert_intermediate = 0;
    EXPECT_EQ(error_of([&] { c.validate("'m'"); }), "target config 'm': field '" + field + "' must be positive, got 0")
        << json;
  }
}
