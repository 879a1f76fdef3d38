// The target model's architecture, read from a Hugging Face `config.json` (Llama, dense Qwen3, Qwen3-MoE, and the
// Qwen3.5 / Qwen3.6 hybrids: Gated DeltaNet linear-attention layers between gated full-attention layers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rope_config.h"

namespace dflash::models {

// The Gated DeltaNet layers of a hybrid (HF `linear_*` fields; defaults as transformers' Qwen3_5TextConfig).
struct LinearAttentionConfig {
  int64_t conv_kernel = 4;       // linear_conv_kernel_dim: short causal depthwise conv over q, k, v
  int64_t key_head_dim = 128;    // linear_key_head_dim
  int64_t value_head_dim = 128;  // linear_value_head_dim
  int64_t num_key_heads = 16;    // linear_num_key_heads (q and k)
  int64_t num_value_heads = 32;  // linear_num_value_heads; each q/k head serves value/key consecutive v heads
  int64_t key_dim() const { return num_key_heads * key_head_dim; }
  int64_t value_dim() const { return num_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels of in_proj_qkv / conv1d
};

// Mixture-of-experts MLPs (Qwen3-MoE, Qwen3.5/3.6-MoE): a softmax router picks `top_k` of `num_experts` SwiGLU
// experts per token; Qwen3.5-MoE adds a shared expert scaled by sigmoid(shared_expert_gate). Absent: num_experts 0.
struct MoeConfig {
  int64_t num_experts = 0;                    // num_experts (or num_local_experts)
  int64_t top_k = 0;                          // num_experts_per_tok
  int64_t expert_intermediate = 0;            // moe_intermediate_size
  bool norm_topk_prob = false;                // renormalise the top-k probabilities to sum to 1
  int64_t sparse_step = 1;                    // decoder_sparse_step: layer i is MoE when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;       // ... and i is not listed here (then a dense MLP)
  int64_t shared_intermediate = 0;            // shared_expert_intermediate_size (0: no shared expert)
  // gpt-oss: the router has a bias and takes the top_k of its logits, then a softmax over those k (instead of a
  // softmax over all experts first); experts have biases and run the clamped SwiGLU
  // (up + 1) * g * sigmoid(alpha g), g = min(gate, limit), up clamped to [-limit, limit].
  bool gpt_oss = false;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
};

struct TargetConfig {
  // "llama", "qwen3", "qwen3_moe", "qwen3_5" (HF qwen3_5 / qwen3_5_text, both layouts), "qwen3_5_moe"
  // (HF qwen3_5_moe / qwen3_5_moe_text, both layouts) or "gpt_oss"
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool attention_bias = false, mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm on q and k before RoPE
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> bos_token_ids, eos_token_ids;

  // Qwen3.5 / Qwen3.6 hybrid (model_type "qwen3_5"). Every RMSNorm weight outside the DeltaNet output norm is
  // stored zero-centred (the norm scales by 1 + w); attention layers gate their output with sigmoid of a second
  // half of q_proj and rotate only the first rotary_dim() dims of each head.
  bool hybrid = false;
  std::vector<std::string> layer_types;  // hybrid: "linear_attention" or "full_attention" per layer
  LinearAttentionConfig linear;
  double partial_rotary_factor = 1.0;
  // Where the decoder's tensors live: "model." (Qwen3_5ForCausalLM) or "model.language_model."
  // (Qwen3_5ForConditionalGeneration); the loader also accepts the other when this one is absent.
  std::string weight_prefix = "model.";
  std::vector<std::string> notes;  // parts of the checkpoint that are ignored (vision tower, MTP head)
  MoeConfig moe;

  // gpt-oss: layer_types alternate "sliding_attention" (a query sees its last sliding_window keys, itself
  // included) and "full_attention"; every attention head has a learned sink logit in its softmax denominator;
  // RMSNorm weights stay float32 and scale before the cast back.
  int64_t sliding_window = 0;
  bool attention_sinks = false;
  bool is_sliding_layer(int64_t i) const {
    return !hybrid && !layer_types.empty() && layer_types.at(static_cast<size_t>(i)) == "sliding_attention";
  }
  // The keys a query of layer i sees behind itself, itself included (0: all of them).
  int64_t window_of(int64_t i) const { return is_sliding_layer(i) ? sliding_window : 0; }

  // Layer i's MLP is a routed mixture of experts (else the dense SwiGLU of intermediate_size).
  bool is_moe_layer(int64_t i) const;
  bool has_dense_mlp() const;  // some layer has the dense MLP (intermediate_size is then required)

  bool is_linear_layer(int64_t i) const {
    return hybrid && layer_types.at(static_cast<size_t>(i)) == "linear_attention";
  }
  int64_t num_linear_layers() const;
  // Head dims RoPE rotates: int(head_dim * partial_rotary_factor), as transformers computes it.
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }

  // Throws std::runtime_error naming `what` and the field when a value is inconsistent.
  void validate(const std::string& what) const;

 private:
  void validate_gpt_oss(const std::string& what) const;
};

// Parses JSON text; `what` names the source in errors.
TargetConfig parse_target_config(const std::string& json_text, const std::string& what);
// Reads `<dir>/config.json`.
TargetConfig load_target_config(const std::string& dir);

}  // namespace dflash::models
