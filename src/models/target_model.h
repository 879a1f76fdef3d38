// The target LLM forward in plain ATen ops, for every family it runs: Llama, dense Qwen3, the Qwen3.5/3.6 Gated
// DeltaNet hybrids, and the mixtures of experts Qwen3-MoE (qwen3_moe), Qwen3.5/3.6-MoE (qwen3_5_moe: the hybrid with
// routed experts and a shared expert) and gpt-oss (gpt_oss: attention sinks, sliding-window layers, experts from
// MXFP4 or dense weights).
// Prefill, one-token decode and block verification are the same call on a KV cache; selected layers' hidden states
// are captured for the drafter. Layers can be split into pipeline stages on different devices (activations move
// between stages). A hybrid's layers dispatch by type: Gated DeltaNet (deltanet_layer.h, its state in the cache) or
// full attention with an output gate and partial RoPE; an MoE layer's MLP is moe_block.h, gpt-oss's attention
// sink_attention.h.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "deltanet_layer.h"
#include "kv_cache.h"
#include "moe_block.h"
#include "rope.h"
#include "target_config.h"

namespace dflash::models {

struct TargetOutput {
  at::Tensor logits;               // [batch, T, vocab] (float32) when asked for; on the last stage's device
  // hidden[i] = HF hidden_states[i + 1]: the output of layer i, on layer i's device; for the last layer
  // (i = L - 1) HF returns the final-normed state, and so do we (then equal to last_hidden).
  std::map<int, at::Tensor> hidden;
  at::Tensor last_hidden;          // after the final norm [batch, T, hidden], when asked for
};

// Layers [begin, end) run on `device`. Embedding lives on the first stage, final norm + LM head on the last.
struct PipelineStage {
  int begin = 0, end = 0;
  at::Device device = at::kCPU;
};

// `n` consecutive near-equal layer ranges, one per device.
std::vector<PipelineStage> split_layers(int num_layers, const std::vector<at::Device>& devices);

struct TargetLoadOptions {
  at::ScalarType dtype = at::kFloat;
  std::vector<PipelineStage> stages;  // empty: every layer on CPU
};

// One forward on its way through the pipeline stages (TargetModel::begin_forward, then forward_stage for every
// stage in order): a pipeline runs each stage on its own thread and hands this on between them.
struct StagedForward {
  at::Tensor x;                   // the hidden state after the stages run so far (on the last one's device)
  at::Tensor cos, sin;            // RoPE tables of the positions (CPU; each stage moves them to its device)
  TargetOutput out;
  std::vector<bool> capture;      // per layer
  bool want_logits = false, want_last_hidden = false;
  KVCache* cache = nullptr;
  int64_t past = 0;               // tokens cached before this forward
};

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

class TargetModel {
 public:
  // Weights by Hugging Face name ("model.layers.0.self_attn.q_proj.weight", ...).
  using WeightFn = std::function<at::Tensor(const std::string& name)>;
  using HasWeightFn = std::function<bool(const std::string& name)>;

  static TargetModel from_weights(const TargetConfig& config, const WeightFn& get, const HasWeightFn& has,
                                  const TargetLoadOptions& options = {});
  // A Hugging Face folder: config.json + model.safetensors (or a sharded index).
  static TargetModel load_hf(const std::string& dir, const TargetLoadOptions& options = {});

  const TargetConfig& config() const { return config_; }
  const std::vector<PipelineStage>& stages() const { return stages_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device input_device() const { return stages_.front().device; }

  KVCache make_cache(int64_t batch, int64_t capacity) const;

  // input_ids [batch, T] int64. With a cache, positions continue from cache->length() and the cache grows
  // by T; without, positions start at 0. capture_layers: the layers whose outputs to return.
  TargetOutput forward(const at::Tensor& input_ids, KVCache* cache, const std::vector<int>& capture_layers,
                       bool want_logits, bool want_last_hidden) const;
  // forward() in pieces, for pipelines: begin_forward checks the inputs and embeds them (first stage's device);
  // forward_stage(s, f) runs stage s's layers, and on the last stage the final norm / logits (and advances the
  // cache). forward() is exactly these calls in order, so a pipelined forward gives the same bits.
  StagedForward begin_forward(const at::Tensor& input_ids, KVCache* cache, const std::vector<int>& capture_layers,
                              bool want_logits, bool want_last_hidden) const;
  void forward_stage(size_t stage, StagedForward& f) const;

  // A copy of this model with stage s on devices[s] (one device per stage, the same layer split), made from this
  // copy's weights, not from disk. A tensor whose device does not change is shared, not copied: replicas on the
  // CPU hold one set of weights (read-only during forwards, so any threads may run them at once).
  TargetModel replicate(const std::vector<at::Device>& devices) const;

  // The frozen matrices the drafter borrows: [vocab, hidden] in dtype(); the LM head is the same tensor as the
  // embedding when tie_word_embeddings (and both stages share a device).
  const at::Tensor& embed_weight() const { return embed_tokens_; }
  const at::Tensor& lm_head_weight() const { return lm_head_; }

  // Decoder layer i's weights under their Hugging Face suffixes ("self_attn.q_proj.weight", ...); only those the
  // architecture has (no biases or q/k norms where absent). Used to start a drafter layer from a target layer.
  // Hybrid: norms as their effective scale (1 + w), an attention layer's q_proj without its gate half, and no
  // attention tensors for Gated DeltaNet layers.
  std::map<std::string, at::Tensor> layer_weights(int i) const;

  at::Tensor embed(const at::Tensor& input_ids) const;       // [batch, T, hidden] on the first stage
  at::Tensor lm_head(const at::Tensor& last_hidden) const;   // float32 logits, on the last stage

  // Ragged batched decode: B independent sequences, sequence b with its own batch-1 cache caches[b] (lengths
  // may differ), each advance by one token (tokens[b]) at its own position. The linear layers and the LM head
  // run on the B stacked rows; RoPE is per row; attention is one fused kernel call for all sequences on CPU
  // float32/float64 (fused_attention = false: a cache store and an SDPA per sequence, the reference path
  // `dflash bench decode --batch` compares against). Returns float32 logits [B, vocab] on the last stage.
  // capture_layers: as forward()'s; (*hidden)[i] = layer i's output rows [B, hidden] (in dtype(), on the layer's
  // device), so regeneration can keep the drafter's features of every token it feeds.
  at::Tensor decode_batch(const std::vector<int64_t>& tokens, const std::vector<KVCache*>& caches,
                          bool fused_attention = true, const std::vector<int>& capture_layers = {},
                          std::map<int, at::Tensor>* hidden = nullptr) const;
  // Opt-in: decode_batch runs its multi-row matmuls through oneDNN (faster than MKL's small-M GEMM on a 2-core
  // AMD EPYC: 8-15% more tokens/s at 8-16 rows on SmolLM2-135M) on extra copies of the CPU float32 weights
  // (twice the weight memory). A no-op for other dtypes or without oneDNN; single-row products and the other
  // paths are unchanged.
  void enable_onednn_decode();

  // Greedy decode of a single sequence; returns the new tokens (ending with an eos id when one is produced).
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new,
                                const std::vector<int64_t>& eos_ids, GenerateStats* stats = nullptr) const;

 private:
  // Throws unless every layer of `cache` is of this model's kind (K/V or Gated DeltaNet state).
  void check_cache_layers(const KVCache& cache, const char* who) const;
  // capture_layers as one flag per layer; an id outside the model is an error naming `who`.
  std::vector<bool> capture_flags(const std::vector<int>& layers, const char* who) const;
  struct Layer {  // (replicate() lists every tensor: add a new one there too)
    at::Device device = at::kCPU;
    // Hybrid: the norms hold their effective scale 1 + w (hybrid_norms.h); q (and q_bias) has 2 Hq D rows,
    // query and output gate interleaved per head.
    at::Tensor in_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
    at::Tensor post_norm, gate, up, down, gate_bias, up_bias, down_bias;
    at::Tensor sinks;  // gpt-oss: one softmax sink logit per query head [Hq] (sink_attention.h)
    bool linear_attn = false;  // a hybrid's Gated DeltaNet layer: dn instead of q..k_norm
    bool moe_layer = false;    // routed experts (moe) instead of gate/up/down
    MoeWeights moe;
    DeltaNetWeights dn;
    std::vector<at::Tensor> onednn;  // q, k, v, o, gate, up, down in oneDNN layout (enable_onednn_decode)
  };
  struct AttentionInputs {
    at::Tensor q, k, v;  // [B, heads, T, D] after norms and RoPE
    at::Tensor gate;     // hybrid: [B, T, Hq D] pre-sigmoid output gate; undefined otherwise
  };
  // x [..., in] times w^T (+ b); through oneDNN when w_onednn is defined and x has several rows.
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& w_onednn) const;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) const;
  at::Tensor layer_forward(int i, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           KVCache* cache, int64_t past) const;
  // The two halves of a layer around attention: q, k, v [B, heads, T, D] after norms and RoPE (and the output
  // gate of a hybrid); then residual + o_proj(attn) + MLP, with attn [B, Hq, T, D].
  AttentionInputs attention_inputs(int i, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                   bool onednn = false) const;
  at::Tensor attention_output_and_mlp(int i, const at::Tensor& x, const at::Tensor& attn, const at::Tensor& gate,
                                      bool onednn = false) const;
  at::Tensor mlp_block(int i, const at::Tensor& x, bool onednn) const;  // x + MLP(post_attention_layernorm(x))
  // A Gated DeltaNet layer's token mixer + MLP, from and to the given states (zeros when undefined).
  at::Tensor deltanet_block(int i, const at::Tensor& x, const at::Tensor& conv0, const at::Tensor& rec0,
                            DeltaNetOutput* out, bool onednn) const;

  TargetConfig config_;
  at::ScalarType dtype_ = at::kFloat;
  std::vector<PipelineStage> stages_;
  std::vector<Layer> layers_;
  at::Tensor embed_tokens_, final_norm_, lm_head_, lm_head_onednn_;
  // The frequencies of a forward whose largest position is `last` (rope_ unless "dynamic" scales beyond
  // max_position_embeddings).
  RopeFrequencies rope_for(int64_t last) const;

  RopeFrequencies rope_;
};

}  // namespace dflash::models
