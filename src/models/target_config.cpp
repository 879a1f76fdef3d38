#include "target_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"
#include "strict_json.h"

namespace dflash::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error("target config " + what + ": " + msg);
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

// transformers >= 5 writes `rope_parameters`; older files have `rope_theta` + `rope_scaling`.
RopeConfig parse_rope(const json& j, const std::string& what) {
  RopeConfig r;
  json p = json::object();
  std::string field = "rope_parameters";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    p = j["rope_parameters"];
  } else {
    field = "rope_scaling";
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) p = j["rope_scaling"];
    if (!p.is_object()) fail(what, "field 'rope_scaling' must be an object or null");
    if (j.contains("rope_theta")) p["rope_theta"] = j["rope_theta"];
  }
  if (!p.is_object()) fail(what, "field '" + field + "' must be an object");
  r.theta = get_num(p, "rope_theta", what + " " + field, 10000.0);
  if (p.contains("rope_type") && p["rope_type"].is_string()) r.type = p["rope_type"].get<std::string>();
  else if (p.contains("type") && p["type"].is_string()) r.type = p["type"].get<std::string>();
  if (r.type == "llama3") {
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!p.contains(k)) fail(what, "field '" + field + "." + k + "' is required for rope_type 'llama3'");
    r.factor = get_num(p, "factor", what, 1.0);
    r.low_freq_factor = get_num(p, "low_freq_factor", what, 1.0);
    r.high_freq_factor = get_num(p, "high_freq_factor", what, 4.0);
    r.original_max_position_embeddings = get_int(p, "original_max_position_embeddings", what, true, 0);
  } else if (r.type != "default") {
    fail(what, "field '" + field + ".rope_type' is '" + r.type + "' (supported: default, llama3)");
  }
  return r;
}

}  // namespace

void TargetConfig::validate(const std::string& what) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(what, std::string("field '") + name + "' must be positive, got " + std::to_string(v));
    // A GGUF block_count of 2^32+1 must not run as a 1-layer model once narrowed to int.
    if (v > kMaxTargetInt)
      fail(what, std::string("field '") + name + "' is " + std::to_string(v) + ", above the limit " +
                     std::to_string(kMaxTargetInt));
  };
  auto finite_positive = [&](const char* name, double v) {
    if (!std::isfinite(v) || !(v > 0))
      fail(what, std::string("field '") + name + "' must be a finite positive number, got " + shown_double(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
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
  finite_positive("rms_norm_eps", rms_norm_eps);
  finite_positive("rope_theta", rope.theta);
  for (double d : rope.freq_divisors) finite_positive("rope_freqs", d);
  if (rope.type == "llama3" && (!std::isfinite(rope.factor) || !std::isfinite(rope.low_freq_factor) ||
                                 !std::isfinite(rope.high_freq_factor) || !(rope.factor > 0) ||
                                 !(rope.high_freq_factor > rope.low_freq_factor) ||
                                 rope.original_max_position_embeddings <= 0))
    fail(what, "llama3 rope parameters need factor > 0, high_freq_factor > low_freq_factor and "
               "original_max_position_embeddings > 0");
  for (auto id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail(what, "field 'eos_token_id' " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(vocab_size) + ")");
  for (auto id : bos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail(what, "field 'bos_token_id' " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(vocab_size) + ")");
}

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
    fail(what, "missing field 'model_type' (expected \"llama\" or \"qwen3\")");
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type != "llama" && c.model_type != "qwen3")
    fail(what, "field 'model_type' is '" + c.model_type + "' (supported: llama, qwen3)");
  c.qk_norm = c.model_type == "qwen3";

  c.vocab_size = get_int(j, "vocab_size", what, true, 0);
  c.hidden_size = get_int(j, "hidden_size", what, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", what, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", what, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", what, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", what, false, c.num_attention_heads);
  if (c.num_attention_heads > 0 && (!j.contains("head_dim") || j["head_dim"].is_null()) &&
      c.hidden_size % c.num_attention_heads != 0)
    fail(what, "field 'head_dim' is absent and hidden_size is not a multiple of num_attention_heads");
  c.head_dim = get_int(j, "head_dim", what, false, c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", what, 1e-6);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", what, false, 0);
  c.attention_bias = get_bool(j, "attention_bias", what, false);
  c.mlp_bias = get_bool(j, "mlp_bias", what, false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", what, false);
  c.rope = parse_rope(j, what);
  c.bos_token_ids = get_ids(j, "bos_token_id", what);
  c.eos_token_ids = get_ids(j, "eos_token_id", what);

  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    fail(what, "field 'hidden_act' is " + j["hidden_act"].dump() + " (supported: \"silu\")");
  if (get_bool(j, "use_sliding_window", what, false))
    fail(what, "field 'use_sliding_window' is true: sliding-window targets are not supported");
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"])
      if (t != "full_attention")
        fail(what, "field 'layer_types' contains " + t.dump() + " (supported: \"full_attention\")");
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
