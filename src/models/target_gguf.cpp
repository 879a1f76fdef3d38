#include "target_gguf.h"

#include <ATen/ATen.h>

#include <map>
#include <regex>
#include <stdexcept>

#include "target_gguf_moe.h"

namespace dflash::models {
namespace {

// llama.cpp's Llama converter (an architecture whose row says gguf.permuted_qk) reorders each head's Q/K rows from the HF "rotate half" layout to interleaved
// pairs: rows (h, i, j) with i in {0,1}, j < D/2 become (h, j, i). Undo it: view [h, D/2, 2, in] -> swap.
at::Tensor unpermute_rope_rows(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  auto rest = w.sizes().slice(1).vec();
  std::vector<int64_t> view = {heads, rows / heads / 2, 2};
  view.insert(view.end(), rest.begin(), rest.end());
  return w.reshape(view).transpose(1, 2).reshape(w.sizes()).contiguous();
}

}  // namespace

std::string gguf_to_hf_name(const std::string& n) {
  static const std::map<std::string, std::string> top = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  if (auto it = top.find(n); it != top.end()) return it->second;
  static const std::map<std::string, std::string> layer = {
      {"attn_norm", "input_layernorm"},   {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},     {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},     {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},      {"ffn_gate_inp", "mlp.gate"},  // the MoE router
  };
  static const std::regex re(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(n, m, re)) return "";
  auto it = layer.find(m[2].str());
  if (it == layer.end()) return "";
  return "model.layers." + m[1].str() + "." + it->second + "." + m[3].str();
}

TargetConfig gguf_target_config(const io::GGUFFile& f) {
  const std::string what = "GGUF '" + f.path() + "'";
  const std::string arch = f.get_string("general.architecture");
  const TargetArchInfo* row = nullptr;
  std::string supported;
  for (const TargetArchInfo& a : target_archs()) {
    if (!a.gguf.arch) continue;
    supported += (supported.empty() ? "" : ", ") + std::string(a.gguf.arch);
    if (arch == a.gguf.arch) row = &a;
  }
  if (!row) throw std::runtime_error(what + ": general.architecture is '" + arch + "' (supported: " + supported + ")");
  auto key = [&](const std::string& k) { return arch + "." + k; };
  TargetConfig c;
  c.arch = row->arch;
  const bool moe = row->gguf.experts;
  c.qk_norm = row->gguf.qk_norm;
  // Sizes and counts become int downstream: each is range-checked here, naming the GGUF key and the stored value.
  constexpr int64_t kMax = 2147483647;
  auto count = [&](const std::string& k) { return f.get_int(key(k), 1, kMax); };
  c.hidden_size = count("embedding_length");
  // routed experts (qwen3moe): every layer is routed, so the dense width (written from intermediate_size) is unused and optional.
  if (!moe || f.has(key("feed_forward_length"))) c.intermediate_size = count("feed_forward_length");
  if (moe) read_gguf_moe_config(f, arch, c);
  c.num_hidden_layers = count("block_count");
  c.num_attention_heads = count("attention.head_count");
  c.num_key_value_heads = f.has(key("attention.head_count_kv")) ? count("attention.head_count_kv") : c.num_attention_heads;
  if (f.has(key("attention.key_length"))) c.head_dim = count("attention.key_length");
  else if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  if (f.has(key("rope.dimension_count")) && count("rope.dimension_count") != c.head_dim)
    throw std::runtime_error(what + ": " + key("rope.dimension_count") + " is " +
                             std::to_string(count("rope.dimension_count")) + ", expected head_dim " +
                             std::to_string(c.head_dim) + " (partial rotary is not supported)");
  c.rms_norm_eps = f.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope.theta = f.has(key("rope.freq_base")) ? f.get_float(key("rope.freq_base")) : 10000.0;
  if (f.has(key("rope.scaling.type")) && f.get_string(key("rope.scaling.type")) != "none")
    throw std::runtime_error(what + ": " + key("rope.scaling.type") + " '" + f.get_string(key("rope.scaling.type")) +
                             "' is not supported");
  if (const io::GGUFTensorInfo* rf = f.find_tensor("rope_freqs.weight")) {
    // llama3 scaling, precomputed by the converter as one divisor per rotary frequency.
    if (rf->numel() != static_cast<uint64_t>(c.head_dim / 2))
      throw std::runtime_error(what + ": tensor 'rope_freqs.weight' has " + std::to_string(rf->numel()) +
                               " values, expected head_dim / 2 = " + std::to_string(c.head_dim / 2));
    for (float v : f.dequantize(*rf)) {
      if (!(v > 0)) throw std::runtime_error(what + ": tensor 'rope_freqs.weight' holds a non-positive divisor");
      c.rope.freq_divisors.push_back(v);
    }
  }
  const io::GGUFTensorInfo& embd = f.tensor("token_embd.weight");
  c.vocab_size = f.has(key("vocab_size")) ? count("vocab_size") : embd.shape()[0];
  c.max_position_embeddings = f.has(key("context_length")) ? f.get_int(key("context_length"), 0, kMax) : 0;
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (f.has("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {f.get_int("tokenizer.ggml.eos_token_id", 0, kMax)};
  if (f.has("tokenizer.ggml.bos_token_id")) c.bos_token_ids = {f.get_int("tokenizer.ggml.bos_token_id", 0, kMax)};
  c.finish();
  c.validate(what);
  if (moe) check_gguf_moe_tensors(f, c);
  return c;
}

TargetModel load_gguf_target(const std::string& path, const TargetLoadOptions& options) {
  io::GGUFFile f = io::GGUFFile::open(path);
  TargetConfig c = gguf_target_config(f);
  std::map<std::string, const io::GGUFTensorInfo*> by_hf;
  for (const auto& t : f.tensors()) {
    std::string hf = gguf_to_hf_name(t.name);
    if (!hf.empty()) by_hf[hf] = &t;
  }
  static const std::regex qk(R"(model\.layers\.\d+\.self_attn\.(q|k)_proj\.(weight|bias))");
  // The experts of a routed layer come from two stacked GGUF tensors (gate and up) fused into one: they are served
  // under the fused HF names the MoE loader takes.
  static const std::regex experts(R"(model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj))");
  auto expert_layer = [&](const std::string& name, std::smatch& m) {
    return c.moe.num_experts > 0 && std::regex_match(name, m, experts) && c.is_moe_layer(std::stoll(m[1].str()));
  };
  auto get = [&](const std::string& name) {
    std::smatch m;
    if (expert_layer(name, m)) {
      const int64_t layer = std::stoll(m[1].str());
      return m[2].str() == "gate_up_proj" ? gguf_expert_gate_up(f, layer) : gguf_expert_down(f, layer);
    }
    at::Tensor w = gguf_float_tensor(f, *by_hf.at(name));
    if (c.info().gguf.permuted_qk && std::regex_match(name, m, qk))
      w = unpermute_rope_rows(w, m[1].str() == "q" ? c.num_attention_heads : c.num_key_value_heads);
    return w;
  };
  auto has = [&](const std::string& name) {
    std::smatch m;
    return by_hf.count(name) > 0 || expert_layer(name, m);
  };
  return TargetModel::from_weights(c, get, has, options);
}

}  // namespace dflash::models
