#include "target_config.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "arch/arch_fields.h"
#include "arch/arch_rows.h"
#include "input_file.h"
#include "strict_json.h"
#include "target_limits.h"

namespace dflash::models {
namespace {

using namespace arch;

// Every model_type spelling of the table, in its order ("llama, qwen3, ...").
std::string supported_model_types() {
  std::string out;
  for (const TargetArchInfo& a : target_archs())
    for (const char* t : a.model_types) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

bool layer_type_allowed(TargetArch arch, LayerType t) {
  if (t == LayerType::linear_attention) return target_arch_info(arch).hybrid;
  if (t == LayerType::sliding_attention) return target_arch_info(arch).sliding;
  return true;
}

}  // namespace

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
  auto positive = [&](const char* name, int64_t v) { check_positive(what, name, v); };
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
    positive(info().expert_width_key, moe.expert_intermediate);
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
  if (const auto check = target_arch_row(arch).validate) check(*this, what);  // what only this architecture has
  if (static_cast<int64_t>(layers.size()) != num_hidden_layers)
    fail(what, "its layer kinds cover " + std::to_string(layers.size()) + " layers, expected " +
                   std::to_string(num_hidden_layers) + " (TargetConfig::finish() not called after the fields changed)");
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
  target_arch_row(c.arch).parse(j, type, what, c);
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
