// The Qwen3.5 / Qwen3.6 hybrids (transformers' Qwen3_5TextConfig, Qwen3_5MoeTextConfig): Gated DeltaNet
// linear-attention layers between full-attention layers whose q_proj also holds a sigmoid output gate and whose
// RoPE turns only the first rotary_dim() dims of a head; norms stored zero-centred. The MoE form routes every
// layer's MLP and adds a gated shared expert. Both read the decoder at the top level (qwen3_5_text) or under
// text_config (qwen3_5, the multimodal checkpoint, its vision tower ignored).
#include <algorithm>

#include "arch_fields.h"
#include "arch_rows.h"
#include "target_limits.h"

namespace dflash::models {
namespace {

using namespace arch;

// Qwen3.5 / Qwen3.6: the hybrid fields of the text decoder `t` (the top level of a qwen3_5_text config, or
// `text_config` of a qwen3_5 one).
void parse_hybrid_fields(const json& t, const std::string& what, TargetConfig& c) {
  c.qk_norm = true;
  if (get_bool(t, "attn_output_gate", what, true) == false)
    fail(what, "field 'attn_output_gate' is false: Qwen3.5 attention without the output gate is not supported");
  c.linear.conv_kernel = get_int(t, "linear_conv_kernel_dim", what, false, c.linear.conv_kernel);
  c.linear.key_head_dim = get_int(t, "linear_key_head_dim", what, false, c.linear.key_head_dim);
  c.linear.value_head_dim = get_int(t, "linear_value_head_dim", what, false, c.linear.value_head_dim);
  c.linear.num_key_heads = get_int(t, "linear_num_key_heads", what, false, c.linear.num_key_heads);
  c.linear.num_value_heads = get_int(t, "linear_num_value_heads", what, false, c.linear.num_value_heads);
  // transformers reads the factor from rope_parameters (a top-level value is moved there); default 0.25.
  c.partial_rotary_factor = 0.25;
  if (t.contains("partial_rotary_factor")) c.partial_rotary_factor = get_num(t, "partial_rotary_factor", what, 0.25);
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (t.contains(key) && t[key].is_object() && t[key].contains("partial_rotary_factor"))
      c.partial_rotary_factor = get_num(t[key], "partial_rotary_factor", what + " " + key, 0.25);
  if (t.contains("layer_types") && !t["layer_types"].is_null()) {
    c.layer_types = parse_layer_types(t, what, c.arch);
  } else {  // transformers' rule: every interval-th layer (1-based) is full attention
    check_target_layer_count(c.num_hidden_layers, what);  // the list below has one entry per layer
    const int64_t interval = get_int(t, "full_attention_interval", what, false, 4);
    if (interval <= 0) fail(what, "field 'full_attention_interval' must be positive, got " + std::to_string(interval));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerType::full_attention : LayerType::linear_attention);
  }
  if (get_int(t, "mtp_num_hidden_layers", what, false, 0) > 0)
    c.notes.push_back("the multi-token-prediction head (mtp.*, " +
                      std::to_string(t["mtp_num_hidden_layers"].get<int64_t>()) + " layers) is ignored");
}

void parse(const json& j, const std::string& type, const std::string& what, TargetConfig& c) {
  // Qwen3_5(Moe)ForConditionalGeneration nests the decoder under text_config (its tensors under
  // model.language_model.*, beside a vision tower); Qwen3_5(Moe)ForCausalLM keeps it at the top level: the
  // row's first spelling is the nested one, its second the text decoder's.
  const bool moe = c.arch == TargetArch::qwen3_5_moe;
  const auto& types = c.info().model_types;
  const bool nested = type == types.front();
  const std::string text_type = types.back();
  if (nested && (!j.contains("text_config") || !j["text_config"].is_object()))
    fail(what, "missing field 'text_config' (a " + type + " config keeps its decoder there)");
  const json& t = nested ? j["text_config"] : j;
  const std::string twhat = nested ? what + " text_config" : what;
  if (nested && t.contains("model_type") && t["model_type"] != text_type)
    fail(twhat, "field 'model_type' is " + t["model_type"].dump() + " (expected \"" + text_type + "\")");
  parse_decoder_fields(t, twhat, c, /*dense_mlp_required=*/!moe);
  if (moe) parse_moe_fields(t, twhat, c, /*shared_expert=*/true);
  // transformers' Qwen3_5TextConfig defaults where the file is silent.
  if (!t.contains("head_dim") || t["head_dim"].is_null()) c.head_dim = 256;
  if (!t.contains("num_key_value_heads") || t["num_key_value_heads"].is_null()) c.num_key_value_heads = 4;
  parse_hybrid_fields(t, twhat, c);
  if (nested) {
    c.weight_prefix = "model.language_model.";
    // transformers ties the LM head by the top-level flag of the composite config (default false).
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", what, false);
    // Released checkpoints put <|endoftext|> in text_config and <|im_end|> at the top: stop at either.
    for (int64_t id : get_ids(j, "eos_token_id", what))
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
    if (c.bos_token_ids.empty()) c.bos_token_ids = get_ids(j, "bos_token_id", what);
    if (j.contains("vision_config") && !j["vision_config"].is_null())
      c.notes.push_back("the vision tower (vision_config, model.visual.*) is ignored: text decoder only");
  }
}

void validate(const TargetConfig& c, const std::string& what) {
  check_positive(what, "linear_conv_kernel_dim", c.linear.conv_kernel);
  check_positive(what, "linear_key_head_dim", c.linear.key_head_dim);
  check_positive(what, "linear_value_head_dim", c.linear.value_head_dim);
  check_positive(what, "linear_num_key_heads", c.linear.num_key_heads);
  check_positive(what, "linear_num_value_heads", c.linear.num_value_heads);
  if (c.linear.num_value_heads % c.linear.num_key_heads != 0)
    fail(what, "field 'linear_num_key_heads' (" + std::to_string(c.linear.num_key_heads) +
                   ") must divide linear_num_value_heads (" + std::to_string(c.linear.num_value_heads) + ")");
  const int64_t rot = c.rotary_dim();
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1) || rot < 2 || rot % 2 != 0)
    fail(what, "field 'partial_rotary_factor' (" + std::to_string(c.partial_rotary_factor) +
                   ") must give an even number of rotated dims in [2, head_dim], got " + std::to_string(rot));
}

}  // namespace

const TargetArchRow& qwen3_5_arch() {
  static const TargetArchRow row{{TargetArch::qwen3_5, "qwen3_5", {"qwen3_5", "qwen3_5_text"}, /*gguf=*/{},
                                  /*hf_class=*/nullptr, NormWeight::zero_centred, /*hybrid=*/true},
                                 parse, validate};
  return row;
}

const TargetArchRow& qwen3_5_moe_arch() {
  static const TargetArchRow row{{TargetArch::qwen3_5_moe, "qwen3_5_moe", {"qwen3_5_moe", "qwen3_5_moe_text"},
                                  /*gguf=*/{}, /*hf_class=*/nullptr, NormWeight::zero_centred, /*hybrid=*/true},
                                 parse, validate};
  return row;
}

}  // namespace dflash::models
