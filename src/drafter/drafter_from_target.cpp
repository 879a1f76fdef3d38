#include "drafter_from_target.h"

#include <algorithm>

namespace dflash::drafter {
namespace {

// The released DFlash drafters of the Qwen3.5 / Qwen3.6 hybrids (z-lab Qwen3.5-9B/27B-DFlash, Qwen3.6-27B-DFlash):
// the facts the rule above takes from them, in one place.
struct ReleasedHybridDrafter {
  int64_t min_target_hidden = 4096;  // smaller hybrids keep their own attention layout
  int64_t q_heads = 32, kv_heads = 8, head_dim = 128;
  int64_t sliding_window = 2048;     // every layer but the last
  int64_t vocab_size = 248320;       // the Qwen3.5 vocabulary ...
  int64_t mask_token_id = 248070;    // ... and the mask token its drafters use
};
constexpr ReleasedHybridDrafter kReleasedHybrid;

}  // namespace

DrafterConfig drafter_config_for_target(const models::TargetConfig& t, int64_t drafter_layers, int64_t block_size,
                                        int64_t mask_token_id, const std::vector<int64_t>& target_layer_ids) {
  DrafterConfig d;
  d.hidden_size = t.hidden_size;
  d.intermediate_size = t.intermediate_size;
  // An MoE target without a dense MLP (Qwen3.5-MoE): the width of the experts one token runs.
  if (d.intermediate_size <= 0) d.intermediate_size = t.moe.expert_intermediate * t.moe.top_k;
  d.num_attention_heads = t.num_attention_heads;
  d.num_key_value_heads = t.num_key_value_heads;
  d.head_dim = t.head_dim;
  d.num_hidden_layers = drafter_layers;
  d.num_target_layers = t.num_hidden_layers;
  d.block_size = block_size;
  d.vocab_size = t.vocab_size;
  d.mask_token_id = mask_token_id;
  d.rms_norm_eps = t.rms_norm_eps;
  d.rope = t.rope;  // theta and scaling: the drafter reads positions of the same sequences
  d.max_position_embeddings = t.max_position_embeddings;
  d.layer_types.assign(size_t(std::max<int64_t>(drafter_layers, 0)), "full_attention");
  d.tie_word_embeddings = t.tie_word_embeddings;
  d.torch_dtype = "bfloat16";
  d.target_layer_ids = target_layer_ids.empty() ? default_target_layer_ids(t.num_hidden_layers, drafter_layers)
                                                : target_layer_ids;
  if (!t.info().hybrid) return d;
  if (t.hidden_size >= kReleasedHybrid.min_target_hidden) {  // the released drafters' attention layout
    d.num_attention_heads = kReleasedHybrid.q_heads;
    d.num_key_value_heads = kReleasedHybrid.kv_heads;
    d.head_dim = kReleasedHybrid.head_dim;
  }
  if (drafter_layers >= 2) {  // Qwen3.6-27B-DFlash: sliding, sliding, ..., full
    d.sliding_window = kReleasedHybrid.sliding_window;
    for (int64_t i = 0; i + 1 < drafter_layers; ++i) d.layer_types[size_t(i)] = "sliding_attention";
  }
  if (d.mask_token_id < 0 && t.vocab_size == kReleasedHybrid.vocab_size) d.mask_token_id = kReleasedHybrid.mask_token_id;
  return d;
}

}  // namespace dflash::drafter
