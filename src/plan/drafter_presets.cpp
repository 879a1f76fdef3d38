#include "drafter_presets.h"

#include <stdexcept>

#include "drafter_from_target.h"
#include "family_registry.h"
#include "target_presets.h"

namespace dflash::plan {
namespace {

constexpr int64_t kPresetDrafterLayers = 5;  // the released DFlash drafters'
constexpr int64_t kPresetBlockSize = 16;

// The drafter `dflash train` builds for a target preset. No mask token is needed to plan memory or time a step:
// where the target's vocabulary has no default one, the last row stands in (as for `plan --target-config`).
drafter::DrafterConfig drafter_for_target(const models::TargetConfig& t) {
  drafter::DrafterConfig d = drafter::drafter_config_for_target(t, kPresetDrafterLayers, kPresetBlockSize, -1, {});
  if (d.mask_token_id < 0) d.mask_token_id = t.vocab_size - 1;
  return d;
}

}  // namespace

drafter::RunShape target_scale_shape() {
  drafter::RunShape s;
  s.max_len = 8000;
  s.num_anchors = 1024;
  s.block_size = kPresetBlockSize;
  s.kl_weight = 0.15;
  s.loss_chunk_rows = 1024;
  s.dtype = util::Dtype::BF16;
  return s;
}

drafter::RunShape cpu_step_shape() {
  drafter::RunShape s;
  s.max_len = 1024;
  s.num_anchors = 64;
  s.block_size = 16;
  s.kl_weight = 0.15;
  s.loss_chunk_rows = 256;
  s.dtype = util::Dtype::F32;
  return s;
}

namespace {

// A CPU-sized drafter (no real target): every shape the planner's tests measure.
drafter::DrafterConfig cpu_shape(int64_t hidden, int64_t mlp, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                 std::vector<std::string> layer_types, int64_t vocab) {
  drafter::DrafterConfig c;
  c.hidden_size = hidden, c.intermediate_size = mlp, c.num_attention_heads = q_heads, c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim, c.num_hidden_layers = int64_t(layer_types.size()), c.vocab_size = vocab;
  c.layer_types = std::move(layer_types);
  c.block_size = 16;
  c.num_target_layers = 12;
  c.rms_norm_eps = 1e-6;
  c.rope.theta = 1e6;
  c.mask_token_id = c.vocab_size - 1;
  c.target_layer_ids = drafter::default_target_layer_ids(c.num_target_layers, c.num_hidden_layers);
  return c;
}

std::vector<DrafterPreset> named_shapes() {
  std::vector<DrafterPreset> out;
  {
    DrafterPreset seed{"seed-27b", drafter_for_target(models::target_preset("qwen3.6-27b")), "qwen3.6-27b"};
    const models::TargetConfig t = models::target_preset("qwen3.6-27b");
    seed.drafter.num_attention_heads = t.num_attention_heads;  // 24
    seed.drafter.num_key_value_heads = t.num_key_value_heads;  // 4
    seed.drafter.head_dim = t.head_dim;                        // 256
    out.push_back(seed);
  }
  out.push_back({"cpu-small", cpu_shape(256, 768, 4, 2, 64, {"full_attention", "full_attention"}, 8192), "",
                 cpu_step_shape()});
  DrafterPreset sliding{"cpu-sliding",
                        cpu_shape(384, 1024, 6, 2, 64, {"sliding_attention", "full_attention", "sliding_attention"}, 12288),
                        "", cpu_step_shape()};
  sliding.drafter.sliding_window = 256;
  out.push_back(sliding);
  DrafterPreset vocab{"cpu-vocab", cpu_shape(192, 512, 4, 1, 48, {"full_attention", "full_attention"}, 32768), "",
                      cpu_step_shape()};
  vocab.drafter.tie_word_embeddings = true;
  out.push_back(vocab);
  return out;
}

}  // namespace

std::vector<std::string> drafter_preset_names() {
  std::vector<std::string> names = models::target_preset_names();
  for (const auto& s : named_shapes()) names.push_back(s.name);
  return names;
}

DrafterPreset drafter_preset(const std::string& name, const std::string& where) {
  if (models::is_target_preset(name)) return {name, drafter_for_target(models::target_preset(name)), name};
  for (auto& s : named_shapes())
    if (s.name == name) return s;
  std::string names;
  for (const auto& n : drafter_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument(where + ": unknown preset '" + name + "' (expected one of " + names + ")");
}

PlanSettings plan_preset(const std::string& name, const std::string& where) {
  const DrafterPreset p = drafter_preset(name, where);
  PlanSettings s;
  s.cfg = p.drafter;
  set_run_shape(s, p.shape);
  s.optimizer = PlanOptimizer::AdamW;
  s.master_fp32 = true;
  s.device = PlanDevice::Cuda;
  return s;
}

drafter::DrafterConfig drafter_as_family(drafter::DrafterConfig c, drafter::FamilyRef f, const std::string& where) {
  if (c.family == f) return c;
  c.family = f;
  c.family_settings = drafter::family_of(f).default_settings(c.hidden_size);  // a head rank follows the size
  c.validate(where);
  return c;
}

}  // namespace dflash::plan
