#include "drafter_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <typeinfo>

#include <nlohmann/json.hpp>

#include "atomic_output.h"
#include "config_fields.h"
#include "family_registry.h"
#include "input_file.h"
#include "strict_json.h"

namespace dflash::drafter {
namespace {

// config_fields.h's readers, by the short names this file uses.
[[noreturn]] void fail(const std::string& where, const std::string& field, const std::string& expected,
                       const std::string& got) {
  fail_field(where, field, expected, got);
}
std::string shown(const nlohmann::json& v) { return shown_field(v); }
int64_t get_int(const nlohmann::json& j, const char* field, const std::string& where, bool required, int64_t def) {
  return int_field(j, field, where, required, def);
}

std::string shown_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nlohmann::json(v).dump();
}

double get_double(const nlohmann::json& j, const char* field, const std::string& where, double def) {
  if (!j.contains(field) || j.at(field).is_null()) return def;
  const auto& v = j.at(field);
  if (!v.is_number()) fail(where, field, "a number", shown(v));
  return v.get<double>();
}

// "[\"DFlashDraftModel\"], [\"Qwen3DSparkModel\"] or [\"DFlash2DraftModel\"]": what architectures may say.
std::string registered_architectures() {
  std::string s;
  const auto& t = registered_families();
  for (size_t i = 0; i < t.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == t.size() ? " or " : ", ") + "[\"" + t[i]->architecture() + "\"]";
  return s;
}

// A config of family `own` that carries another family's setting keys is refused rather than read as a drafter
// without that family's modules. `in_dflash_config`: the keys that live in dflash_config (`obj`), else top level.
void refuse_other_families_keys(const Family& own, const nlohmann::json& obj, bool in_dflash_config,
                                const std::string& where) {
  for (const Family* other : registered_families()) {
    if (other == &own) continue;
    const FamilySettingKeys keys = other->setting_keys();
    for (const std::string& k : in_dflash_config ? keys.in_dflash_config : keys.top_level)
      if (obj.contains(k))
        fail(where, (in_dflash_config ? "dflash_config." : "") + k,
             std::string("absent for architectures [\"") + own.architecture() + "\"] (a " + other->display_name() +
                 " drafter says [\"" + other->architecture() + "\"])",
             shown(obj.at(k)));
  }
}

}  // namespace

int64_t DrafterConfig::window_for_layer(int64_t i) const {
  return layer_types.at(size_t(i)) == "sliding_attention" ? sliding_window : 0;
}

void DrafterConfig::validate(const std::string& where) const {
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) fail(where, field, "a positive integer", std::to_string(v));
  };
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_target_layers", num_target_layers);
  positive("vocab_size", vocab_size);
  if (draft_vocab_size < 0 || draft_vocab_size > vocab_size)
    fail(where, "draft_vocab_size", "in [1, vocab_size=" + std::to_string(vocab_size) + "] (absent: the full vocabulary)",
         std::to_string(draft_vocab_size));
  if (block_size < 2) fail(where, "block_size", "an integer >= 2", std::to_string(block_size));
  if (num_attention_heads % num_key_value_heads != 0)
    fail(where, "num_key_value_heads", "a divisor of num_attention_heads (" + std::to_string(num_attention_heads) + ")",
         std::to_string(num_key_value_heads));
  if (head_dim % 2 != 0) fail(where, "head_dim", "an even number (RoPE rotates pairs)", std::to_string(head_dim));
  if (const auto e = util::out_of_range(rms_norm_eps, models::norm_eps_range()))
    fail(where, "rms_norm_eps", *e, shown_double(rms_norm_eps));
  if (!rope.freq_divisors.empty())
    throw std::invalid_argument(where + ": RoPE frequency divisors (a GGUF target's rope_freqs.weight) have no "
                                "config.json spelling: give a drafter_config with the target's rope_scaling");
  try {
    models::check_rope_config(rope, max_position_embeddings);
  } catch (const models::RopeConfigError& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  if (mask_token_id < 0 || mask_token_id >= vocab_size)
    fail(where, "dflash_config.mask_token_id", "a token id in [0, vocab_size=" + std::to_string(vocab_size) + ")",
         std::to_string(mask_token_id));
  if (int64_t(layer_types.size()) != num_hidden_layers)
    fail(where, "layer_types", std::to_string(num_hidden_layers) + " entries (num_hidden_layers)",
         std::to_string(layer_types.size()) + " entries");
  bool any_sliding = false;
  for (size_t i = 0; i < layer_types.size(); ++i) {
    if (layer_types[i] != "full_attention" && layer_types[i] != "sliding_attention")
      fail(where, "layer_types[" + std::to_string(i) + "]", "\"full_attention\" or \"sliding_attention\"",
           "\"" + layer_types[i] + "\"");
    any_sliding |= layer_types[i] == "sliding_attention";
  }
  if (any_sliding && sliding_window <= 0)
    fail(where, "sliding_window", "a positive integer (layer_types has sliding_attention layers)",
         std::to_string(sliding_window));
  const Family& fam = family_of(family);
  // The family's settings object, of the family's own type (a config made in code without them, or switched to
  // another family with the old ones, is a programming error: logic_error), then its values.
  const auto defaults = fam.default_settings(hidden_size);
  const FamilySettings* expected = defaults.get();
  const FamilySettings* given = family_settings.get();
  if (bool(expected) != bool(given) || (expected && typeid(*expected) != typeid(*given)))
    throw std::logic_error(where + ": a drafter config of family '" + fam.name() + "' holds " +
                           (family_settings ? (defaults ? "another family's settings" : "settings the family does not have")
                                            : "no family settings") +
                           " (set DrafterConfig::family_settings from the family's read_settings or default_settings)");
  if (family_settings) family_settings->validate(*this, where);
  // A family without a draft vocabulary (a refusal to give) is refused one where it is read, not trained as a
  // full-vocabulary drafter whose saved config still says draft_vocab_size (export then refused it).
  if (*fam.draft_vocab_refusal() && draft_vocab_size != 0)
    fail(where, "draft_vocab_size",
         std::string("absent with architectures [\"") + fam.architecture() + "\"] (" + fam.draft_vocab_refusal() + ")",
         std::to_string(draft_vocab_size));
  if (target_layer_ids.empty()) fail(where, "dflash_config.target_layer_ids", "a non-empty list", "[]");
  for (size_t i = 0; i < target_layer_ids.size(); ++i) {
    if (target_layer_ids[i] < 0 || target_layer_ids[i] >= num_target_layers)
      fail(where, "dflash_config.target_layer_ids[" + std::to_string(i) + "]",
           "a layer index in [0, num_target_layers=" + std::to_string(num_target_layers) + ")",
           std::to_string(target_layer_ids[i]));
    // A repeated layer would feed `fc` the same features twice: a different drafter than the one meant.
    for (size_t k = 0; k < i; ++k)
      if (target_layer_ids[k] == target_layer_ids[i])
        fail(where, "dflash_config.target_layer_ids[" + std::to_string(i) + "]",
             "a layer not listed before (each target layer once)",
             std::to_string(target_layer_ids[i]) + " (also at index " + std::to_string(k) + ")");
  }
}

namespace {

std::vector<int64_t> spread_layer_ids(int64_t L, int64_t n) {
  if (n == 1) return {L / 2};
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i)
    ids.push_back(int64_t(std::nearbyint(1.0 + double(i) * double(L - 4) / double(n - 1))));
  return ids;
}

// Each id once and inside [0, L).
bool usable_layer_ids(const std::vector<int64_t>& ids, int64_t L) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= L) return false;
    for (size_t k = 0; k < i; ++k)
      if (ids[k] == ids[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> default_target_layer_ids(int64_t L, int64_t n) {
  if (n <= 0) throw std::invalid_argument("default_target_layer_ids: need at least one drafter layer");
  std::vector<int64_t> ids = spread_layer_ids(L, n);
  if (usable_layer_ids(ids, L)) return ids;
  // Too many drafter layers for this target: say so, not "each target layer once (also at index 0)", which blamed a
  // list nobody wrote.
  int64_t most = 0;
  for (int64_t m = std::min<int64_t>(n - 1, 4096); m >= 1 && most == 0; --m)
    if (usable_layer_ids(spread_layer_ids(L, m), L)) most = m;
  throw std::invalid_argument(
      "drafter_layers " + std::to_string(n) + " is too many for a target of " + std::to_string(L) +
      " layers: the default target_layer_ids (one target layer per drafter layer, spread over layers 1.." +
      std::to_string(std::max<int64_t>(L - 3, 1)) + ") would repeat a layer or fall outside the target; " +
      (most > 0 ? "use at most " + std::to_string(most) + " drafter layers" : "this target is too small for a default") +
      " or list target_layer_ids");
}

DrafterConfig parse_drafter_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "(top level)", "a JSON object", j.type_name());
  DrafterConfig c;
  const Family* fam = &family_of(c.family);
  if (j.contains("architectures")) {
    // Exactly one entry: a list naming two families (or a family and something else) used to be read as its first.
    const auto& a = j.at("architectures");
    fam = a.is_array() && a.size() == 1 && a[0].is_string() ? find_family_of_architecture(a[0].get<std::string>())
                                                             : nullptr;
    if (!fam) fail(where, "architectures", registered_architectures(), shown(a));
    c.family = *fam;
  }
  refuse_other_families_keys(*fam, j, false, where);
  if (j.contains("model_type") && j.at("model_type") != "qwen3")
    fail(where, "model_type", "\"qwen3\"", shown(j.at("model_type")));
  const nlohmann::json empty = nlohmann::json::object();
  // DeepSpec writes a DSpark drafter's mask_token_id and target_layer_ids at the top level, with no dflash_config.
  const nlohmann::json& dc =
      j.contains("dflash_config") ? j.at("dflash_config") : fam->flat_dflash_config() ? j : empty;
  if (!dc.is_object()) fail(where, "dflash_config", "an object", shown(dc));
  refuse_other_families_keys(*fam, dc, true, where);
  c.family_settings = fam->read_settings(j, dc, where);

  c.hidden_size = get_int(j, "hidden_size", where, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", where, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", where, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", where, false, c.num_attention_heads);
  c.head_dim = get_int(j, "head_dim", where, false,
                       c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", where, true, 0);
  c.num_target_layers = get_int(j, "num_target_layers", where, true, 0);
  c.vocab_size = get_int(j, "vocab_size", where, true, 0);
  // vLLM reads an absent draft_vocab_size as vocab_size: both mean the target's own LM head.
  if (j.contains("draft_vocab_size") && !j.at("draft_vocab_size").is_null()) {
    c.draft_vocab_size = get_int(j, "draft_vocab_size", where, true, 0);
    if (c.draft_vocab_size <= 0) fail(where, "draft_vocab_size", "a positive integer", std::to_string(c.draft_vocab_size));
    if (c.draft_vocab_size == c.vocab_size) c.draft_vocab_size = 0;
  }
  // block_size lives at the top level in released configs; some put it in dflash_config.
  c.block_size = j.contains("block_size") ? get_int(j, "block_size", where, true, 16)
                                          : get_int(dc, "block_size", where + " dflash_config", false, 16);
  // Both places (as `dflash export` writes them): engines read one or the other first, so they must agree.
  if (j.contains("block_size") && dc.contains("block_size") &&
      get_int(dc, "block_size", where + " dflash_config", true, 16) != c.block_size)
    fail(where, "dflash_config.block_size", "the top-level block_size " + std::to_string(c.block_size),
         shown(dc.at("block_size")));
  c.rms_norm_eps = get_double(j, "rms_norm_eps", where, 1e-6);
  c.sliding_window = get_int(j, "sliding_window", where, false, 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", where, false, 0);
  // transformers >= 5 writes rope_parameters; older files a top-level rope_theta and rope_scaling. Strict: a key
  // this type of scaling does not read would be lost on export, so it is refused.
  try {
    c.rope = models::parse_rope_config(j, DrafterConfig{}.rope.theta, c.max_position_embeddings, true);
  } catch (const models::RopeConfigError& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  // Causal drafter layers are not implemented (every family's block attends both ways here), and the engines read
  // `is_causal: true` (vLLM: then `dflash_config.causal`) as every layer causal: such a config is refused where it is
  // read rather than trained or evaluated as a different model.
  for (const auto& [obj, key, field] : {std::tuple<const nlohmann::json*, const char*, const char*>{&j, "is_causal", "is_causal"},
                                        {&dc, "causal", "dflash_config.causal"}}) {
    if (!obj->contains(key) || obj->at(key).is_null()) continue;
    if (!obj->at(key).is_boolean() || obj->at(key).get<bool>())
      fail(where, field, "false or absent (causal drafter layers are not implemented: the block attends both ways)",
           shown(obj->at(key)));
  }
  if (j.contains("tie_word_embeddings")) {
    if (!j.at("tie_word_embeddings").is_boolean())
      fail(where, "tie_word_embeddings", "true or false", shown(j.at("tie_word_embeddings")));
    c.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  }
  if (j.contains("torch_dtype") && j.at("torch_dtype").is_string()) c.torch_dtype = j.at("torch_dtype");
  else if (j.contains("dtype") && j.at("dtype").is_string()) c.torch_dtype = j.at("dtype");

  if (!dc.contains("mask_token_id")) fail(where, "dflash_config.mask_token_id", "an integer", "nothing (missing)");
  const auto mask = io::json_integer_in(dc.at("mask_token_id"), -2147483648LL, 2147483647LL);
  if (!mask) fail(where, "dflash_config.mask_token_id", "an integer", shown(dc.at("mask_token_id")));
  c.mask_token_id = *mask;

  if (dc.contains("target_layer_ids") && !dc.at("target_layer_ids").is_null()) {
    const auto& ids = dc.at("target_layer_ids");
    if (!ids.is_array()) fail(where, "dflash_config.target_layer_ids", "a list of integers", shown(ids));
    for (const auto& v : ids) {
      const auto id = io::json_integer_in(v, -2147483648LL, 2147483647LL);
      if (!id) fail(where, "dflash_config.target_layer_ids", "a list of integers", shown(ids));
      c.target_layer_ids.push_back(*id);
    }
  } else if (c.num_target_layers > 0 && c.num_hidden_layers > 0) {
    try {
      c.target_layer_ids = default_target_layer_ids(c.num_target_layers, c.num_hidden_layers);
    } catch (const std::invalid_argument& e) {  // the config's own fields are the drafter_layers here
      throw std::invalid_argument(where + ": num_hidden_layers and num_target_layers without "
                                  "dflash_config.target_layer_ids: " + e.what());
    }
  }

  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const auto& lt = j.at("layer_types");
    if (!lt.is_array()) fail(where, "layer_types", "a list of strings", shown(lt));
    for (const auto& v : lt) {
      if (!v.is_string()) fail(where, "layer_types", "a list of strings", shown(lt));
      c.layer_types.push_back(v.get<std::string>());
    }
  } else {
    c.layer_types.assign(size_t(std::max<int64_t>(0, c.num_hidden_layers)), "full_attention");
  }
  // None of the family's keys given: its defaults for this shape (family.h), so its code can always read them.
  if (!c.family_settings) c.family_settings = fam->default_settings(c.hidden_size);
  c.validate(where);
  return c;
}

DrafterConfig load_drafter_config(const std::string& path) {
  std::string text;
  try {
    text = io::read_regular_file(path, 64 << 20);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string(e.what()) + " (the drafter config)");
  }
  nlohmann::json j;
  try {
    j = io::parse_json_strict(text);  // a key given twice is an error, not "last one wins"
  } catch (const io::JsonError& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
  return parse_drafter_config(j, path);
}

nlohmann::json drafter_config_to_json(const DrafterConfig& c) {
  nlohmann::json j;
  j["architectures"] = {family_of(c.family).architecture()};
  j["model_type"] = "qwen3";
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["block_size"] = c.block_size;
  j["num_target_layers"] = c.num_target_layers;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["dflash_config"] = {{"mask_token_id", c.mask_token_id}, {"target_layer_ids", c.target_layer_ids}};
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  // Both layouts, equal: transformers 4 and the engines pinned to it read rope_theta + rope_scaling (null when
  // unscaled, as released drafters have it), transformers 5 rope_parameters (rope_scaling first when both exist).
  j["rope_theta"] = c.rope.theta;
  j["rope_scaling"] = models::rope_scaling_json(c.rope);
  j["rope_parameters"] = models::rope_parameters_json(c.rope);
  j["layer_types"] = c.layer_types;
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  bool any_sliding = false;
  for (const auto& t : c.layer_types) any_sliding |= t == "sliding_attention";
  j["use_sliding_window"] = any_sliding;
  j["vocab_size"] = c.vocab_size;
  if (c.draft_vocab_size > 0) j["draft_vocab_size"] = c.draft_vocab_size;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  if (c.family_settings) c.family_settings->write(c, j);
  return j;
}

void save_drafter_config(const std::string& path, const DrafterConfig& c) {
  c.validate("config to save as " + path);
  io::write_file_atomically(path, drafter_config_to_json(c).dump(2) + "\n");  // whole or absent
}

}  // namespace dflash::drafter
