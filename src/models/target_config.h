// The target model's architecture, read from a Hugging Face `config.json` (Llama and dense Qwen3).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash::models {

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // "default" or "llama3"
  // llama3 frequency scaling (only read when type == "llama3").
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // Per-frequency divisors (llama.cpp's `rope_freqs.weight`, how GGUF stores llama3 scaling); empty: none.
  std::vector<double> freq_divisors;
};

struct TargetConfig {
  std::string model_type;  // "llama" or "qwen3"
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool attention_bias = false, mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm on q and k before RoPE
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> bos_token_ids, eos_token_ids;

  // Throws std::runtime_error naming `what` and the field when a value is inconsistent.
  void validate(const std::string& what) const;
};

// Parses JSON text; `what` names the source in errors.
TargetConfig parse_target_config(const std::string& json_text, const std::string& what);
// Reads `<dir>/config.json`.
TargetConfig load_target_config(const std::string& dir);

}  // namespace dflash::models
