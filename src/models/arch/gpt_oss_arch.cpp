// gpt-oss (transformers' GptOssConfig): every layer an MoE of intermediate_size experts (a biased router that takes
// the top_k logits, then a softmax over those; clamped SwiGLU experts with biases; MXFP4 weights dequantised on load
// by gpt_oss_weights.h), alternating sliding-window and full attention with a sink logit per head
// (sink_attention.h), YaRN RoPE, norms that scale in float32.
#include <algorithm>
#include <cmath>

#include "arch_fields.h"
#include "arch_rows.h"
#include "target_limits.h"

namespace dflash::models {
namespace {

using namespace arch;

// transformers' GptOssConfig defaults where the file is silent.
void parse(const json& j, const std::string&, const std::string& what, TargetConfig& c) {
  parse_decoder_fields(j, what, c, /*dense_mlp_required=*/true);
  c.attention_bias = get_bool(j, "attention_bias", what, true);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", what, 1e-5);
  if (!j.contains("head_dim") || j["head_dim"].is_null()) c.head_dim = 64;
  if (!j.contains("num_key_value_heads") || j["num_key_value_heads"].is_null()) c.num_key_value_heads = 8;
  if (!j.contains("max_position_embeddings") || j["max_position_embeddings"].is_null()) c.max_position_embeddings = 131072;
  if (absent(j, "rope_parameters") && absent(j, "rope_scaling")) {  // GptOssConfig's default: YaRN over 4096 positions
    json r = {{"rope_theta", absent(j, "rope_theta") ? json(150000.0) : j["rope_theta"]}, {"rope_type", "yarn"},
              {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", false},
              {"original_max_position_embeddings", 4096}};
    c.rope = parse_rope(json{{"rope_parameters", r}}, c.max_position_embeddings, what);
  } else {
    try {
      c.rope = parse_rope_config(j, 150000.0, c.max_position_embeddings, /*strict=*/false);
    } catch (const RopeConfigError& e) {
      fail(what, e.what());
    }
  }
  c.sliding_window = get_int(j, "sliding_window", what, false, 128);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    c.layer_types = parse_layer_types(j, what, c.arch);
  } else {  // transformers' rule: even layers (0, 2, ...) slide, odd ones see everything
    check_target_layer_count(c.num_hidden_layers, what);  // the list below has one entry per layer
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back(i % 2 == 0 ? LayerType::sliding_attention : LayerType::full_attention);
  }
  MoeConfig& m = c.moe;  // every layer routed (sparse_step 1), by its logits' top k, clamped SwiGLU experts
  m.router = MoeRouter::topk_softmax;
  m.experts = MoeExperts::clamped_swiglu;
  const char* experts_key = !absent(j, "num_local_experts") ? "num_local_experts" : "num_experts";
  m.num_experts = get_int(j, experts_key, what, true, 0);
  m.top_k = get_int(j, "num_experts_per_tok", what, false, 4);
  m.expert_intermediate = c.intermediate_size;
  m.swiglu_alpha = get_num(j, "swiglu_alpha", what, 1.702);
  m.swiglu_limit = get_num(j, "swiglu_limit", what, 7.0);
  if (!absent(j, "quantization_config")) {
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>() : q.dump();
    if (method != "mxfp4")
      fail(what, "field 'quantization_config.quant_method' is " + method + " (supported: \"mxfp4\", dequantised on load)");
    c.notes.push_back("MXFP4 expert weights are dequantised on load: memory holds them in the model dtype");
  }
}

void validate(const TargetConfig& c, const std::string& what) {
  const bool any_sliding =
      std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding_attention) != c.layer_types.end();
  if (any_sliding && (c.sliding_window <= 0 || c.sliding_window > kMaxTargetInt))
    fail(what, "field 'sliding_window' is " + std::to_string(c.sliding_window) +
                   ", expected a positive integer (layer_types has sliding_attention layers)");
  const MoeConfig& moe = c.moe;
  if (moe.num_experts <= 0) fail(what, "field 'num_local_experts' must be positive, got " + std::to_string(moe.num_experts));
  for (auto [name, v] : {std::pair<const char*, double>{"swiglu_alpha", moe.swiglu_alpha}, {"swiglu_limit", moe.swiglu_limit}})
    if (!std::isfinite(v) || !(v > 0))
      fail(what, std::string("field '") + name + "' must be a finite positive number, got " + shown_double(v));
}

}  // namespace

const TargetArchRow& gpt_oss_arch() {
  static const TargetArchRow row = [] {
    TargetArchRow r{{TargetArch::gpt_oss, "gpt_oss", {"gpt_oss"}, /*gguf=*/{}, /*hf_class=*/nullptr, NormWeight::float32,
                     /*hybrid=*/false, /*sinks=*/true, /*sliding=*/true},
                    parse, validate};
    r.info.experts = ExpertWeights::interleaved_biased;  // GptOssExperts' tensors, MXFP4 or plain
    r.info.expert_width_key = "intermediate_size";       // GptOssConfig: each expert's width
    return r;
  }();
  return row;
}

}  // namespace dflash::models
