// A tiny drafter config of any registered family for the families' tests: its architecture, and keys added to
// dflash_config and to the top level (a family's own settings).
#pragma once
#include <nlohmann/json.hpp>

#include "drafter_config.h"

inline dflash::drafter::DrafterConfig tiny_family_config(
    const char* architecture, const nlohmann::json& extra_dflash_config = nlohmann::json::object(),
    const nlohmann::json& extra_top = nlohmann::json::object()) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "model_type": "qwen3", "block_size": 4, "num_target_layers": 8, "num_hidden_layers": 2,
    "dflash_config": {"mask_token_id": 31, "target_layer_ids": [1, 5]},
    "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "vocab_size": 32})");
  j["architectures"] = {architecture};
  j["dflash_config"].update(extra_dflash_config);
  j.update(extra_top);
  return dflash::drafter::parse_drafter_config(j, "tiny.json");
}
