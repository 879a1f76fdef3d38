#include "arch_fields.h"

#include <cmath>
#include <stdexcept>

#include "strict_json.h"

namespace dflash::models::arch {

void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error("target config " + what + ": " + msg);
}

void check_positive(const std::string& what, const char* name, int64_t v) {
  if (v <= 0) fail(what, std::string("field '") + name + "' must be positive, got " + std::to_string(v));
  // A GGUF block_count of 2^32+1 must not run as a 1-layer model once narrowed to int.
  if (v > kMaxTargetInt)
    fail(what, std::string("field '") + name + "' is " + std::to_string(v) + ", above the limit " +
                   std::to_string(kMaxTargetInt));
}

bool absent(const json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

int64_t get_int(const json& j, const std::string& key, const std::string& what, bool required, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) fail(what, "missing field '" + key + "' (expected a positive integer)");
    return def;
  }
  if (!j[key].is_number_integer()) fail(what, "field '" + key + "' must be an integer, got " + io::json_shown(j[key]));
  // Counts and sizes are narrowed to int downstream: refuse what would wrap, showing the value as written.
  const auto v = io::json_integer_in(j[key], 0, kMaxTargetInt);
  if (!v) fail(what, "field '" + key + "' is " + io::json_shown(j[key]) + ", outside [0, " + std::to_string(kMaxTargetInt) + "]");
  return *v;
}

double get_num(const json& j, const std::string& key, const std::string& what, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) fail(what, "field '" + key + "' must be a number, got " + j[key].dump());
  return j[key].get<double>();
}

bool get_bool(const json& j, const std::string& key, const std::string& what, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail(what, "field '" + key + "' must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

std::string shown_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return json(v).dump();
}

std::vector<int64_t> get_ids(const json& j, const std::string& key, const std::string& what) {
  std::vector<int64_t> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  const json& v = j[key];
  auto id = [&](const json& e) {
    const auto n = io::json_integer_in(e, 0, kMaxTargetInt);
    if (!n) fail(what, "field '" + key + "' must hold token ids (integers in [0, " + std::to_string(kMaxTargetInt) +
                           "]), got " + io::json_shown(e));
    return *n;
  };
  if (v.is_number()) return {id(v)};
  if (!v.is_array()) fail(what, "field '" + key + "' must be an integer or a list of integers");
  for (const auto& e : v) out.push_back(id(e));
  return out;
}

// transformers >= 5 writes `rope_parameters`; older files have `rope_theta` + `rope_scaling` (rope_config.h).
RopeConfig parse_rope(const json& j, int64_t max_positions, const std::string& what) {
  try {
    return parse_rope_config(j, 10000.0, max_positions, /*strict=*/false);
  } catch (const RopeConfigError& e) {
    fail(what, e.what());
  }
}


// The layer types an architecture's layer_types may hold, as the errors list them.
const char* supported_layer_types(TargetArch arch) {
  if (target_arch_info(arch).hybrid) return "\"linear_attention\", \"full_attention\"";
  if (target_arch_info(arch).sliding) return "\"sliding_attention\", \"full_attention\"";
  return "\"full_attention\"";
}

std::vector<LayerType> parse_layer_types(const json& t, const std::string& what, TargetArch arch) {
  std::vector<LayerType> out;
  if (!t["layer_types"].is_array()) fail(what, "field 'layer_types' must be a list of strings");
  for (const auto& e : t["layer_types"]) {
    const std::string at = "field 'layer_types[" + std::to_string(out.size()) + "]'";
    if (!e.is_string()) fail(what, at + " must be a string, got " + e.dump());
    const std::string name = e.get<std::string>();
    bool known = false;
    for (LayerType lt : {LayerType::full_attention, LayerType::sliding_attention, LayerType::linear_attention})
      if (name == layer_type_name(lt)) out.push_back(lt), known = true;
    if (!known) fail(what, at + " is \"" + name + "\" (supported: " + supported_layer_types(arch) + ")");
  }
  return out;
}

void check_full_attention_only(const json& j, const std::string& what) {
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"])
      if (t != "full_attention")
        fail(what, "field 'layer_types' contains " + t.dump() + " (supported: \"full_attention\")");
}

void parse_decoder_fields(const json& t, const std::string& what, TargetConfig& c, bool dense_mlp_required) {
  c.vocab_size = get_int(t, "vocab_size", what, true, 0);
  c.hidden_size = get_int(t, "hidden_size", what, true, 0);
  c.intermediate_size = get_int(t, "intermediate_size", what, dense_mlp_required, 0);
  c.num_hidden_layers = get_int(t, "num_hidden_layers", what, true, 0);
  c.num_attention_heads = get_int(t, "num_attention_heads", what, true, 0);
  c.num_key_value_heads = get_int(t, "num_key_value_heads", what, false, c.num_attention_heads);
  if (c.num_attention_heads > 0 && (!t.contains("head_dim") || t["head_dim"].is_null()) &&
      c.hidden_size % c.num_attention_heads != 0)
    fail(what, "field 'head_dim' is absent and hidden_size is not a multiple of num_attention_heads");
  c.head_dim = get_int(t, "head_dim", what, false, c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.rms_norm_eps = get_num(t, "rms_norm_eps", what, 1e-6);
  c.max_position_embeddings = get_int(t, "max_position_embeddings", what, false, 0);
  c.attention_bias = get_bool(t, "attention_bias", what, false);
  c.mlp_bias = get_bool(t, "mlp_bias", what, false);
  c.tie_word_embeddings = get_bool(t, "tie_word_embeddings", what, false);
  c.rope = parse_rope(t, c.max_position_embeddings, what);
  c.bos_token_ids = get_ids(t, "bos_token_id", what);
  c.eos_token_ids = get_ids(t, "eos_token_id", what);
  if (t.contains("hidden_act") && t["hidden_act"] != "silu")
    fail(what, "field 'hidden_act' is " + t["hidden_act"].dump() + " (supported: \"silu\")");
  if (get_bool(t, "use_sliding_window", what, false))
    fail(what, "field 'use_sliding_window' is true: sliding-window targets are not supported");
}


void parse_moe_fields(const json& t, const std::string& what, TargetConfig& c, bool shared_expert) {
  MoeConfig& m = c.moe;
  const char* experts_key = t.contains("num_experts") && !t["num_experts"].is_null() ? "num_experts" : "num_local_experts";
  m.num_experts = get_int(t, experts_key, what, true, 0);
  if (m.num_experts <= 0) fail(what, std::string("field '") + experts_key + "' must be positive, got " + std::to_string(m.num_experts));
  m.top_k = get_int(t, "num_experts_per_tok", what, true, 0);
  m.expert_intermediate = get_int(t, "moe_intermediate_size", what, true, 0);
  if (shared_expert) {  // Qwen3.5-MoE: every layer routed, top-k always renormalised, a gated shared expert
    m.norm_topk_prob = true;
    m.shared_intermediate = get_int(t, "shared_expert_intermediate_size", what, true, 0);
    if (m.shared_intermediate <= 0)
      fail(what, "field 'shared_expert_intermediate_size' must be positive, got " + std::to_string(m.shared_intermediate));
  } else {
    m.norm_topk_prob = get_bool(t, "norm_topk_prob", what, false);
    m.sparse_step = get_int(t, "decoder_sparse_step", what, false, 1);
    if (t.contains("mlp_only_layers") && !t["mlp_only_layers"].is_null()) {
      if (!t["mlp_only_layers"].is_array()) fail(what, "field 'mlp_only_layers' must be a list of layer ids");
      for (const auto& e : t["mlp_only_layers"]) {
        const auto v = io::json_integer_in(e, 0, kMaxTargetInt);
        if (!v) fail(what, "field 'mlp_only_layers' must hold layer ids, got " + io::json_shown(e));
        m.mlp_only_layers.push_back(*v);
      }
    }
  }
}


}  // namespace dflash::models::arch
