// The DFlash drafter's config.json (the format released drafters ship with): read, validate, write.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "family_ref.h"
#include "rope_config.h"

namespace dflash::drafter {

class FamilySettings;  // family.h

struct DrafterConfig {
  // The registered family config.json's architectures names (family_ref.h, family_registry.h); absent: the
  // default family, dflash.
  FamilyRef family;
  // The family's own settings (family.h: DSpark's heads, DFlash2's convs and selector), opaque here: the family's
  // code reads them through family_settings_as. nullptr: the family has none. Immutable, so copies of a config
  // share them; replace the object to change one.
  std::shared_ptr<const FamilySettings> family_settings;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_target_layers = 0;
  int64_t block_size = 16;
  int64_t vocab_size = 0;
  // Rows of the drafter's own LM head (a draft vocabulary: d2t/t2d, docs/TRAINING.md); 0 = the target's full
  // vocabulary through the target's LM head. config.json's `draft_vocab_size` (equal to vocab_size reads as 0).
  int64_t draft_vocab_size = 0;
  int64_t mask_token_id = -1;
  double rms_norm_eps = 1e-6;
  // rope_theta and RoPE scaling (rope_config.h: config.json's rope_parameters / rope_scaling, written back as given).
  models::RopeConfig rope{1e6};
  int64_t sliding_window = 0;               // used by layers whose type is "sliding_attention"
  int64_t max_position_embeddings = 0;      // the target's context length (0: unknown)
  std::vector<std::string> layer_types;     // "full_attention" / "sliding_attention", one per layer
  std::vector<int64_t> target_layer_ids;    // target layers whose outputs feed `fc`, in concat order
  bool tie_word_embeddings = false;         // of the target: LM head = embedding when true
  std::string torch_dtype = "bfloat16";

  // Attention window for layer i: sliding_window for sliding layers, 0 (= full) otherwise.
  int64_t window_for_layer(int64_t i) const;
  // Throws std::invalid_argument naming `where` (a file or "config"), the field and what was expected.
  void validate(const std::string& where) const;
};

// docs/DFLASH.md's default: round(1 + i*(L-4)/(n-1)) for i in [0, n) (Python's round: ties to even); n=1 -> [L/2].
std::vector<int64_t> default_target_layer_ids(int64_t num_target_layers, int64_t num_drafter_layers);

DrafterConfig parse_drafter_config(const nlohmann::json& j, const std::string& where);
DrafterConfig load_drafter_config(const std::string& path);
nlohmann::json drafter_config_to_json(const DrafterConfig& c);
void save_drafter_config(const std::string& path, const DrafterConfig& c);

}  // namespace dflash::drafter
