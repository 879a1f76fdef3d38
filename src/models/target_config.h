// The target model's architecture, read from a Hugging Face `config.json` (Llama, dense Qwen3, Qwen3-MoE, the
// Qwen3.5 / Qwen3.6 hybrids: Gated DeltaNet linear-attention layers between gated full-attention layers, their MoE
// form, and gpt-oss): the architecture as an enum, its sizes, and each layer's kind.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch_list.h"
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

// The architectures a target may have (one line each in arch/arch_list.h), parsed once from config.json's
// model_type (or a GGUF's general.architecture). Code outside src/models/arch never branches on a value: it
// reads what target_arch_info says the architecture implies (tests/python/test_target_arch_table.py).
#define DFLASH_TARGET_ARCH_ENUM(name) name,
enum class TargetArch : uint8_t { DFLASH_TARGET_ARCHS(DFLASH_TARGET_ARCH_ENUM) };
#undef DFLASH_TARGET_ARCH_ENUM

// How an RMSNorm applies its weight, in transformers' order of operations for the architecture.
enum class NormWeight : uint8_t {
  after_cast,    // normalise in float32, cast back, then scale (Llama, Qwen3)
  zero_centred,  // stored as w, scales by 1 + w (the Qwen3.5 / Qwen3.6 hybrids: hybrid_norms.h)
  float32,       // the float32 weight scales before the cast back (gpt-oss)
};

// How a checkpoint stores a routed layer's router and experts (TargetModel::from_weights loads by it).
enum class ExpertWeights : uint8_t {
  gate_up_down,        // router mlp.gate; mlp.experts.N.{gate,up,down}_proj per expert, or fused gate_up_proj and
                       // down_proj; a shared expert when the config has one (moe_weights.h)
  interleaved_biased,  // router mlp.router with a bias; fused gate_up_proj (gate and up columns alternating) and
                       // down_proj with biases, or their MXFP4 _blocks + _scales (gpt_oss_weights.h)
};

// How a llama.cpp GGUF file of the architecture is read (target_gguf.cpp); the tensor names are llama.cpp's,
// shared by every architecture (gguf_to_hf_name).
struct GgufLayout {
  const char* arch = nullptr;  // its general.architecture, the prefix of its metadata keys (nullptr: not read)
  bool qk_norm = false;        // its blocks hold attn_q_norm / attn_k_norm (the config's qk_norm)
  bool experts = false;        // every layer routed: <arch>.expert_* keys, blk.N.ffn_*_exps (target_gguf_moe.h)
  bool permuted_qk = false;    // llama.cpp's converter interleaved each head's q/k rows for its RoPE: undone on load
};

// What an architecture implies, one row per TargetArch (target_archs()), defined in its file of src/models/arch.
struct TargetArchInfo {
  TargetArch arch;
  const char* name;                      // as model_type is written back and shown ("qwen3_5")
  std::vector<const char*> model_types;  // the config.json spellings that parse to it ("qwen3_5", "qwen3_5_text")
  GgufLayout gguf;                       // its GGUF form (gguf.arch nullptr: not read from GGUF)
  const char* hf_class = nullptr;        // `architectures` of the config.json written from a GGUF (nullptr: none)
  NormWeight norm = NormWeight::after_cast;
  bool hybrid = false;  // Gated DeltaNet layers between attention layers whose q_proj also holds an output gate
  bool sinks = false;   // every attention head has a learned sink logit in its softmax denominator
  bool sliding = false;  // layer_types may hold sliding_attention (a window of sliding_window keys)
  ExpertWeights experts = ExpertWeights::gate_up_down;  // a routed layer's tensors
  const char* expert_width_key = "moe_intermediate_size";  // the config.json field of an expert's width
  bool mlp_bias_field = false;  // its transformers config reads mlp_bias (written back by `target hf-folder`)
};
const TargetArchInfo& target_arch_info(TargetArch arch);
const std::vector<TargetArchInfo>& target_archs();  // every row, in enum order
const char* target_arch_name(TargetArch arch);

// config.json's layer_types, typed: what one layer's token mixer is.
enum class LayerType : uint8_t { full_attention, sliding_attention, linear_attention };
const char* layer_type_name(LayerType t);  // the config.json spelling

// One decoder layer's kind, computed once from the config (TargetConfig::finish).
enum class Mixer : uint8_t { attention, deltanet };
enum class Mlp : uint8_t { dense, moe };
struct LayerKind {
  Mixer mixer = Mixer::attention;
  Mlp mlp = Mlp::dense;
  int64_t window = 0;  // attention: the keys a query sees behind itself, itself included (0: all of them)
  bool sinks = false;  // attention: one sink logit per head (sink_attention.h)
  bool operator==(const LayerKind& o) const {
    return mixer == o.mixer && mlp == o.mlp && window == o.window && sinks == o.sinks;
  }
};

// How the router turns its logits into the top_k weights.
enum class MoeRouter : uint8_t {
  softmax_topk,  // softmax over all experts in float32, then the top_k (renormalised when norm_topk_prob)
  topk_softmax,  // the router has a bias; the top_k logits, then a softmax over those k (gpt-oss)
};
// What each expert runs.
enum class MoeExperts : uint8_t {
  swiglu,          // silu(gate) * up
  clamped_swiglu,  // with biases: (up + 1) * g * sigmoid(alpha g), g = min(gate, limit), up in [-limit, limit]
};

// Mixture-of-experts MLPs (Qwen3-MoE, Qwen3.5/3.6-MoE, gpt-oss): a router picks `top_k` of `num_experts` SwiGLU
// experts per token; Qwen3.5-MoE adds a shared expert scaled by sigmoid(shared_expert_gate). Absent: num_experts 0.
struct MoeConfig {
  int64_t num_experts = 0;                    // num_experts (or num_local_experts)
  int64_t top_k = 0;                          // num_experts_per_tok
  int64_t expert_intermediate = 0;            // moe_intermediate_size
  bool norm_topk_prob = false;                // renormalise the top-k probabilities to sum to 1
  int64_t sparse_step = 1;                    // decoder_sparse_step: layer i is MoE when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;       // ... and i is not listed here (then a dense MLP)
  int64_t shared_intermediate = 0;            // shared_expert_intermediate_size (0: no shared expert)
  MoeRouter router = MoeRouter::softmax_topk;
  MoeExperts experts = MoeExperts::swiglu;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  // clamped_swiglu's alpha and limit
};

struct TargetConfig {
  TargetArch arch{};  // the first of arch_list.h (a config built in code sets its own)
  const TargetArchInfo& info() const { return target_arch_info(arch); }
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool attention_bias = false, mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm on q and k before RoPE
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> bos_token_ids, eos_token_ids;

  // Qwen3.5 / Qwen3.6 hybrid (info().hybrid). Every RMSNorm weight outside the DeltaNet output norm is stored
  // zero-centred (the norm scales by 1 + w); attention layers gate their output with sigmoid of a second half of
  // q_proj and rotate only the first rotary_dim() dims of each head.
  LinearAttentionConfig linear;
  double partial_rotary_factor = 1.0;
  // Where the decoder's tensors live: "model." (Qwen3_5ForCausalLM) or "model.language_model."
  // (Qwen3_5ForConditionalGeneration); the loader also accepts the other when this one is absent.
  std::string weight_prefix = "model.";
  std::vector<std::string> notes;  // parts of the checkpoint that are ignored (vision tower, MTP head)
  MoeConfig moe;

  // Per layer, as config.json's layer_types (empty: every layer full attention). Hybrid: linear_attention or
  // full_attention; gpt-oss: sliding_attention (a query sees its last sliding_window keys, itself included) or
  // full_attention.
  std::vector<LayerType> layer_types;
  int64_t sliding_window = 0;

  // Each layer's kind, computed by finish() from the fields above: the parsers call it; a config built in code
  // calls it once its fields are set (TargetModel::from_weights calls it on its copy).
  std::vector<LayerKind> layers;
  void finish();

  // Layer i's MLP is a routed mixture of experts (else the dense SwiGLU of intermediate_size).
  bool is_moe_layer(int64_t i) const { return layer(i).mlp == Mlp::moe; }
  bool has_dense_mlp() const;  // some layer has the dense MLP (intermediate_size is then required)
  bool is_linear_layer(int64_t i) const { return layer(i).mixer == Mixer::deltanet; }
  // The keys a query of layer i sees behind itself, itself included (0: all of them).
  int64_t window_of(int64_t i) const { return layer(i).window; }
  const LayerKind& layer(int64_t i) const { return layers.at(static_cast<size_t>(i)); }
  int64_t num_linear_layers() const;
  // Head dims RoPE rotates: int(head_dim * partial_rotary_factor), as transformers computes it.
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }

  // Throws std::runtime_error naming `what` and the field when a value is inconsistent.
  void validate(const std::string& what) const;

 private:
  void validate_layer_types(const std::string& what) const;
  bool moe_by_fields(int64_t i) const;  // decoder_sparse_step and mlp_only_layers say layer i is routed
};

// Parses JSON text; `what` names the source in errors. An unknown model_type is an error listing the supported ones.
TargetConfig parse_target_config(const std::string& json_text, const std::string& what);
// Reads `<dir>/config.json`.
TargetConfig load_target_config(const std::string& dir);

}  // namespace dflash::models
