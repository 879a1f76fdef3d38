// Tiny random Llama / Qwen3 / Qwen3.5-hybrid targets built in memory, shared by the model and data tests.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "target_config.h"
#include "target_model.h"

namespace dflash::models::tiny {

// Largest elementwise difference, in fp64; a shape mismatch fails the calling test.
inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// "llama" or "qwen3".
inline TargetConfig tiny_config(const std::string& type) {
  TargetConfig c;
  c.arch = type == "llama" ? TargetArch::llama : TargetArch::qwen3;
  c.qk_norm = type == "qwen3";
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = type == "qwen3" ? 16 : 8;
  c.tie_word_embeddings = type == "llama";
  if (type == "llama") {
    c.rope.type = "llama3";
    c.rope.theta = 500000;
    c.rope.factor = 8;
    c.rope.low_freq_factor = 1;
    c.rope.high_freq_factor = 4;
    c.rope.original_max_position_embeddings = 16;
  }
  c.finish();
  return c;
}

inline std::map<std::string, at::Tensor> random_weights(const TargetConfig& c, uint64_t seed) {
  at::manual_seed(seed);
  std::map<std::string, at::Tensor> w;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  auto mat = [](int64_t o, int64_t i) { return at::randn({o, i}) / std::sqrt(static_cast<double>(i)); };
  auto norm = [](int64_t n) { return 1 + 0.1 * at::randn({n}); };
  w["model.embed_tokens.weight"] = at::randn({c.vocab_size, H});
  w["model.norm.weight"] = norm(H);
  if (!c.tie_word_embeddings) w["lm_head.weight"] = mat(c.vocab_size, H);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = norm(H);
    w[p + "post_attention_layernorm.weight"] = norm(H);
    w[p + "self_attn.q_proj.weight"] = mat(c.num_attention_heads * D, H);
    w[p + "self_attn.k_proj.weight"] = mat(c.num_key_value_heads * D, H);
    w[p + "self_attn.v_proj.weight"] = mat(c.num_key_value_heads * D, H);
    w[p + "self_attn.o_proj.weight"] = mat(H, c.num_attention_heads * D);
    if (c.qk_norm) {
      w[p + "self_attn.q_norm.weight"] = norm(D);
      w[p + "self_attn.k_norm.weight"] = norm(D);
    }
    w[p + "mlp.gate_proj.weight"] = mat(I, H);
    w[p + "mlp.up_proj.weight"] = mat(I, H);
    w[p + "mlp.down_proj.weight"] = mat(H, I);
  }
  return w;
}

// A Qwen3.5-style hybrid: 5 layers (DeltaNet, DeltaNet, attention, DeltaNet, attention), GVA (2 q/k heads for
// 4 v heads), partial RoPE (a quarter of head_dim 16), zero-centred norms.
inline TargetConfig tiny_hybrid_config() {
  TargetConfig c;
  c.arch = TargetArch::qwen3_5;
  c.qk_norm = true;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 5;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.partial_rotary_factor = 0.25;
  c.rope.theta = 10000;
  using LT = LayerType;
  c.layer_types = {LT::linear_attention, LT::linear_attention, LT::full_attention, LT::linear_attention,
                   LT::full_attention};
  c.linear.conv_kernel = 4;
  c.linear.key_head_dim = 8;
  c.linear.value_head_dim = 6;
  c.linear.num_key_heads = 2;
  c.linear.num_value_heads = 4;
  c.finish();
  return c;
}

inline std::map<std::string, at::Tensor> random_hybrid_weights(const TargetConfig& c, uint64_t seed) {
  at::manual_seed(seed);
  std::map<std::string, at::Tensor> w;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const auto& lc = c.linear;
  auto mat = [](int64_t o, int64_t i) { return at::randn({o, i}) / std::sqrt(static_cast<double>(i)); };
  auto zc_norm = [](int64_t n) { return 0.2 * at::randn({n}); };  // stored zero-centred
  w["model.embed_tokens.weight"] = at::randn({c.vocab_size, H});
  w["model.norm.weight"] = zc_norm(H);
  w["lm_head.weight"] = mat(c.vocab_size, H);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = zc_norm(H);
    w[p + "post_attention_layernorm.weight"] = zc_norm(H);
    if (c.is_linear_layer(i)) {
      const std::string a = p + "linear_attn.";
      w[a + "in_proj_qkv.weight"] = mat(lc.conv_dim(), H);
      w[a + "in_proj_z.weight"] = mat(lc.value_dim(), H);
      w[a + "in_proj_b.weight"] = mat(lc.num_value_heads, H);
      w[a + "in_proj_a.weight"] = mat(lc.num_value_heads, H);
      w[a + "conv1d.weight"] = 0.5 * at::randn({lc.conv_dim(), 1, lc.conv_kernel});
      w[a + "A_log"] = at::empty({lc.num_value_heads}).uniform_(0.02, 2.0).log();
      w[a + "dt_bias"] = 0.5 * at::randn({lc.num_value_heads});
      w[a + "norm.weight"] = 1 + 0.2 * at::randn({lc.value_head_dim});
      w[a + "out_proj.weight"] = mat(H, lc.value_dim());
    } else {
      w[p + "self_attn.q_proj.weight"] = mat(2 * c.num_attention_heads * D, H);
      w[p + "self_attn.k_proj.weight"] = mat(c.num_key_value_heads * D, H);
      w[p + "self_attn.v_proj.weight"] = mat(c.num_key_value_heads * D, H);
      w[p + "self_attn.o_proj.weight"] = mat(H, c.num_attention_heads * D);
      w[p + "self_attn.q_norm.weight"] = zc_norm(D);
      w[p + "self_attn.k_norm.weight"] = zc_norm(D);
    }
    w[p + "mlp.gate_proj.weight"] = mat(I, H);
    w[p + "mlp.up_proj.weight"] = mat(I, H);
    w[p + "mlp.down_proj.weight"] = mat(H, I);
  }
  return w;
}

inline TargetModel make_model(const TargetConfig& c, const std::map<std::string, at::Tensor>& w,
                       TargetLoadOptions opts = {}) {
  return TargetModel::from_weights(
      c, [&](const std::string& n) { return w.at(n); }, [&](const std::string& n) { return w.count(n) > 0; },
      opts);
}

}  // namespace dflash::models::tiny
