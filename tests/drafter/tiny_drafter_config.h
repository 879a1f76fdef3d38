// A 2-layer drafter config small enough for fp64 gradient tests: one sliding-window layer (window 8), one
// full-attention layer, GQA (4 q heads on 2 KV heads), block 4, vocabulary 32 (mask token 31).
#pragma once
#include <nlohmann/json.hpp>

inline nlohmann::json tiny_drafter_config_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4,
    "num_target_layers": 8, "num_hidden_layers": 2,
    "dflash_config": {"mask_token_id": 31, "target_layer_ids": [1, 5]},
    "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8, "vocab_size": 32,
    "tie_word_embeddings": true})");
}
