#include "target_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"
#include "strict_json.h"
#include "target_limits.h"

namespace dflash::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error("target config " + what + ": " + msg);
}

// Every model_type spelling of the table, in its order ("llama, qwen3, ...").
std::string supported_model_types() {
  std::string out;
  for (const TargetArchInfo& a : target_archs())
    for (const char* t : a.model_types) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

// The layer types an architecture's layer_types may hold, as the errors list them.
const char* supported_layer_types(TargetArch arch) {
  if (target_arch_info(arch).hybrid) return "\"linear_attention\", \"full_attention\"";
  if (target_arch_info(arch).sliding) return "\"sliding_attention\", \"full_attention\"";
  return "\"full_attention\"";
}

bool layer_type_allowed(TargetArch arch, LayerType t) {
  if (t == LayerType::linear_attention) return target_arch_info(arch).hybrid;
  if (t == LayerType::sliding_attention) return target_arch_info(arch).sliding;
  return true;
}

constexpr int64_t kMaxTargetInt = 2147483647;  // sizes and counts become int (layers, heads, token ids)

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

// 1e-09, not 0.000000; inf and nan by name (JSON has no spelling for them).
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

}  // namespace

namespace {

void validate_gpt_oss(const TargetConfig& c, const std::string& what) {
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

const std::vector<TargetArchInfo>& target_archs() {
  // One row per TargetArch, in enum order: a new architecture is a new row (and its parse in this file).
  static const std::vector<TargetArchInfo> rows = {
      {TargetArch::llama, "llama", {"llama"}, "llama", "LlamaForCausalLM"},
      {TargetArch::qwen3, "qwen3", {"qwen3"}, "qwen3", "Qwen3ForCausalLM"},
      {TargetArch::qwen3_moe, "qwen3_moe", {"qwen3_moe"}, "qwen3moe", "Qwen3MoeForCausalLM"},
      {TargetArch::qwen3_5, "qwen3_5", {"qwen3_5", "qwen3_5_text"}, nullptr, nullptr, NormWeight::zero_centred,
       /*hybrid=*/true},
      {TargetArch::qwen3_5_moe, "qwen3_5_moe", {"qwen3_5_moe", "qwen3_5_moe_text"}, nullptr, nullptr,
       NormWeight::zero_centred, /*hybrid=*/true},
      {TargetArch::gpt_oss, "gpt_oss", {"gpt_oss"}, nullptr, nullptr, NormWeight::float32, /*hybrid=*/false,
       /*sinks=*/true, /*sliding=*/true},
  };
  return rows;
}

const TargetArchInfo& target_arch_info(TargetArch arch) {
  const auto& rows = target_archs();
  const size_t i = static_cast<size_t>(arch);
  if (i >= rows.size() || rows[i].arch != arch)
    throw std::logic_error("target_arch_info: no row for architecture " + std::to_string(i));
  return rows[i];
}

const char* target_arch_name(TargetArch arch) { return target_arch_info(arch).name; }

const char* layer_type_name(LayerType t) {
  switch (t) {
    case LayerType::full_attention: return "full_attention";
    case LayerType::sliding_attention: return "sliding_attention";
    case LayerType::linear_attention: return "linear_attention";
  }
  return "?";
}

void TargetConfig::finish() {
  layers.clear();
  if (num_hidden_layers < 0 || num_hidden_layers > kMaxTargetLayers) return;  // validate() names the field
  layers.resize(static_cast<size_t>(num_hidden_layers));
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const LayerType t = size_t(i) < layer_types.size() ? layer_types[size_t(i)] : LayerType::full_attention;
    LayerKind& k = layers[size_t(i)];
    k.mixer = t == LayerType::linear_attention ? Mixer::deltanet : Mixer::attention;
    k.mlp = moe_by_fields(i) ? Mlp::moe : Mlp::dense;
    k.window = t == LayerType::sliding_attention ? sliding_window : 0;
    k.sinks = k.mixer == Mixer::attention && info().sinks;
  }
}

void TargetConfig::validate(const std::string& what) const {
  check_target_limits(*this, what);  // what the arithmetic and memory allow, before anything is sized by it
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(what, std::string("field '") + name + "' must be positive, got " + std::to_string(v));
    // A GGUF block_count of 2^32+1 must not run as a 1-layer model once narrowed to int.
    if (v > kMaxTargetInt)
      fail(what, std::string("field '") + name + "' is " + std::to_string(v) + ", above the limit " +
                     std::to_string(kMaxTargetInt));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  if (has_dense_mlp()) positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  if (num_attention_heads % num_key_value_heads != 0)
    fail(what, "field 'num_key_value_heads' (" + std::to_string(num_key_value_heads) +
                   ") must divide num_attention_heads (" + std::to_string(num_attention_heads) + ")");
  if (head_dim % 2 != 0) fail(what, "field 'head_dim' must be even for RoPE, got " + std::to_string(head_dim));
  if (max_position_embeddings < 0 || max_position_embeddings > kMaxTargetInt)
    fail(what, "field 'max_position_embeddings' is " + std::to_string(max_position_embeddings) + ", outside [0, " +
                   std::to_string(kMaxTargetInt) + "]");
  if (const auto e = util::out_of_range(rms_norm_eps, norm_eps_range()))
    fail(what, "field 'rms_norm_eps' must be " + *e + ", got " + shown_double(rms_norm_eps));
  for (double d : rope.freq_divisors)  // per-frequency factors: the range of rope_scaling.factor
    if (const auto e = util::out_of_range(d, util::closed(1e-3, 1e6)))
      fail(what, "field 'rope_freqs' must hold " + *e + " per frequency, got " + shown_double(d));
  try {
    check_rope_config(rope, max_position_embeddings);
  } catch (const RopeConfigError& e) {
    fail(what, e.what());
  }
  for (auto id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail(what, "field 'eos_token_id' " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(vocab_size) + ")");
  for (auto id : bos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail(what, "field 'bos_token_id' " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(vocab_size) + ")");
  if (moe.num_experts > 0) {
    positive(arch == TargetArch::gpt_oss ? "intermediate_size" : "moe_intermediate_size", moe.expert_intermediate);
    positive("decoder_sparse_step", moe.sparse_step);
    if (moe.top_k < 1 || moe.top_k > moe.num_experts)
      fail(what, "field 'num_experts_per_tok' is " + std::to_string(moe.top_k) + ", expected 1.." +
                     std::to_string(moe.num_experts) + " (num_experts)");
    for (int64_t l : moe.mlp_only_layers)
      if (l < 0 || l >= num_hidden_layers)
        fail(what, "field 'mlp_only_layers' lists layer " + std::to_string(l) + ", outside [0, " +
                       std::to_string(num_hidden_layers) + ")");
    if (moe.shared_intermediate < 0)
      fail(what, "field 'shared_expert_intermediate_size' must be positive, got " + std::to_string(moe.shared_intermediate));
  }
  validate_layer_types(what);
  if (arch == TargetArch::gpt_oss) validate_gpt_oss(*this, what);
  if (static_cast<int64_t>(layers.size()) != num_hidden_layers)
    fail(what, "its layer kinds cover " + std::to_string(layers.size()) + " layers, expected " +
                   std::to_string(num_hidden_layers) + " (TargetConfig::finish() not called after the fields changed)");
  if (!info().hybrid) return;
  positive("linear_conv_kernel_dim", linear.conv_kernel);
  positive("linear_key_head_dim", linear.key_head_dim);
  positive("linear_value_head_dim", linear.value_head_dim);
  positive("linear_num_key_heads", linear.num_key_heads);
  positive("linear_num_value_heads", linear.num_value_heads);
  if (linear.num_value_heads % linear.num_key_heads != 0)
    fail(what, "field 'linear_num_key_heads' (" + std::to_string(linear.num_key_heads) +
                   ") must divide linear_num_value_heads (" + std::to_string(linear.num_value_heads) + ")");
  const int64_t rot = rotary_dim();
  if (!(partial_rotary_factor > 0 && partial_rotary_factor <= 1) || rot < 2 || rot % 2 != 0)
    fail(what, "field 'partial_rotary_factor' (" + std::to_string(partial_rotary_factor) +
                   ") must give an even number of rotated dims in [2, head_dim], got " + std::to_string(rot));
}

void TargetConfig::validate_layer_types(const std::string& what) const {
  // The hybrids and gpt-oss list every layer; the others may list theirs (all full attention).
  const bool listed = info().hybrid || info().sliding;
  if ((listed || !layer_types.empty()) && static_cast<int64_t>(layer_types.size()) != num_hidden_layers)
    fail(what, "field 'layer_types' has " + std::to_string(layer_types.size()) + " entries, expected " +
                   std::to_string(num_hidden_layers) + " (num_hidden_layers)");
  for (size_t i = 0; i < layer_types.size(); ++i)
    if (!layer_type_allowed(arch, layer_types[i]))
      fail(what, "field 'layer_types[" + std::to_string(i) + "]' is \"" + layer_type_name(layer_types[i]) +
                     "\" (supported: " + supported_layer_types(arch) + ")");
}


bool TargetConfig::moe_by_fields(int64_t i) const {
  if (moe.num_experts <= 0) return false;
  if (std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), i) != moe.mlp_only_layers.end()) return false;
  return moe.sparse_step > 0 && (i + 1) % moe.sparse_step == 0;
}

bool TargetConfig::has_dense_mlp() const {
  // Closed form of "some layer is not MoE" (is_moe_layer per layer costs the mlp_only_layers list each time).
  if (moe.num_experts <= 0 || moe.sparse_step != 1) return num_hidden_layers > 0;
  for (int64_t l : moe.mlp_only_layers)
    if (l >= 0 && l < num_hidden_layers) return true;
  return false;
}

int64_t TargetConfig::num_linear_layers() const {
  int64_t n = 0;
  for (const LayerKind& k : layers) n += k.mixer == Mixer::deltanet;
  return n;
}

namespace {

// config.json's layer_types as the enum: a name outside the three is an error listing what `arch` supports.
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

// The decoder fields every supported architecture shares, read from `t`.
// `dense_mlp_required`: false for MoE families whose layers may all be routed (intermediate_size then optional).
void parse_decoder_fields(const json& t, const std::string& what, TargetConfig& c, bool dense_mlp_required = true) {
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

// The routed-expert fields (Qwen3-MoE / Qwen3.5-MoE names; transformers 5 may write num_local_experts).
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

// gpt-oss (transformers' GptOssConfig; its defaults where the file is silent): every layer an MoE of
// intermediate_size experts, alternating sliding-window and full attention with sinks, YaRN RoPE.
void parse_gpt_oss(const json& j, const std::string& what, TargetConfig& c) {
  parse_decoder_fields(j, what, c, /*dense_mlp_required=*/true);
  c.attention_bias = get_bool(j, "attention_bias", what, true);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", what, 1e-5);
  if (!j.contains("head_dim") || j["head_dim"].is_null()) c.head_dim = 64;
  if (!j.contains("num_key_value_heads") || j["num_key_value_heads"].is_null()) c.num_key_value_heads = 8;
  if (!j.contains("max_position_embeddings") || j["max_position_embeddings"].is_null()) c.max_position_embeddings = 131072;
  auto absent = [&](const char* k) { return !j.contains(k) || j[k].is_null(); };
  if (absent("rope_parameters") && absent("rope_scaling")) {  // GptOssConfig's default: YaRN over 4096 positions
    json r = {{"rope_theta", absent("rope_theta") ? json(150000.0) : j["rope_theta"]}, {"rope_type", "yarn"},
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
  const char* experts_key = !absent("num_local_experts") ? "num_local_experts" : "num_experts";
  m.num_experts = get_int(j, experts_key, what, true, 0);
  m.top_k = get_int(j, "num_experts_per_tok", what, false, 4);
  m.expert_intermediate = c.intermediate_size;
  m.swiglu_alpha = get_num(j, "swiglu_alpha", what, 1.702);
  m.swiglu_limit = get_num(j, "swiglu_limit", what, 7.0);
  if (!absent("quantization_config")) {
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>() : q.dump();
    if (method != "mxfp4")
      fail(what, "field 'quantization_config.quant_method' is " + method + " (supported: \"mxfp4\", dequantised on load)");
    c.notes.push_back("MXFP4 expert weights are dequantised on load: memory holds them in the model dtype");
  }
}

}  // namespace

TargetConfig parse_target_config(const std::string& json_text, const std::string& what) {
  json j;
  try {
    j = io::parse_json_strict(json_text);  // a key given twice is an error, not "last one wins"
  } catch (const io::JsonError& e) {
    fail(what, e.what());
  }
  if (!j.is_object()) fail(what, "must be a JSON object");
  TargetConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail(what, "missing field 'model_type' (expected one of: " + supported_model_types() + ")");
  const std::string type = j["model_type"].get<std::string>();
  const TargetArchInfo* row = nullptr;
  for (const TargetArchInfo& a : target_archs())
    for (const char* t : a.model_types)
      if (type == t) row = &a;
  if (!row) fail(what, "field 'model_type' is '" + type + "' (supported: " + supported_model_types() + ")");
  c.arch = row->arch;
  if (c.arch == TargetArch::gpt_oss) {
    parse_gpt_oss(j, what, c);
  } else if (row->hybrid) {
    // Qwen3_5(Moe)ForConditionalGeneration nests the decoder under text_config (its tensors under
    // model.language_model.*, beside a vision tower); Qwen3_5(Moe)ForCausalLM keeps it at the top level: the
    // row's first spelling is the nested one, its second the text decoder's.
    const bool moe = c.arch == TargetArch::qwen3_5_moe;
    const bool nested = type == row->model_types.front();
    const std::string text_type = row->model_types.back();
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
  } else {
    const bool moe = c.arch == TargetArch::qwen3_moe;
    c.qk_norm = c.arch == TargetArch::qwen3 || moe;
    parse_decoder_fields(j, what, c, /*dense_mlp_required=*/!moe);
    if (moe) parse_moe_fields(j, what, c, /*shared_expert=*/false);
    if (j.contains("layer_types") && j["layer_types"].is_array())
      for (const auto& t : j["layer_types"])
        if (t != "full_attention")
          fail(what, "field 'layer_types' contains " + t.dump() + " (supported: \"full_attention\")");
  }
  c.finish();
  c.validate(what);
  return c;
}

TargetConfig load_target_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::string text;
  try {
    text = io::read_regular_file(path);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("target config ") + e.what());
  }
  return parse_target_config(text, "'" + path + "'");
}

}  // namespace dflash::models
