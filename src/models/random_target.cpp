#include "random_target.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>

namespace dflash::models {

TargetModel random_target(const TargetConfig& c, const TargetLoadOptions& options, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::map<std::string, at::Tensor> w;
  auto mat = [&](const std::string& name, int64_t out, int64_t in) {
    w[name] = at::randn({out, in}, gen) / std::sqrt(double(in));
  };
  // hybrid norms are stored zero-centred (the norm scales by 1 + w): 0 is neutral there, 1 elsewhere
  const bool zero_centred = c.info().norm == NormWeight::zero_centred, gated = c.info().hybrid;
  auto norm = [&](const std::string& name, int64_t n) { w[name] = zero_centred ? at::zeros({n}) : at::ones({n}); };
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
  const LinearAttentionConfig& l = c.linear;
  w["model.embed_tokens.weight"] = at::randn({c.vocab_size, H}, gen);
  norm("model.norm.weight", H);
  if (!c.tie_word_embeddings) mat("lm_head.weight", c.vocab_size, H);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    if (c.is_linear_layer(i)) {
      const std::string a = p + "linear_attn.";
      mat(a + "in_proj_qkv.weight", l.conv_dim(), H);
      mat(a + "in_proj_z.weight", l.value_dim(), H);
      mat(a + "in_proj_b.weight", l.num_value_heads, H);
      mat(a + "in_proj_a.weight", l.num_value_heads, H);
      w[a + "conv1d.weight"] = 0.5 * at::randn({l.conv_dim(), 1, l.conv_kernel}, gen);
      w[a + "A_log"] = at::zeros({l.num_value_heads});  // decay rate 1
      w[a + "dt_bias"] = at::zeros({l.num_value_heads});
      w[a + "norm.weight"] = at::ones({l.value_head_dim});
      mat(a + "out_proj.weight", H, l.value_dim());
    } else {
      mat(p + "self_attn.q_proj.weight", gated ? 2 * q_out : q_out, H);
      mat(p + "self_attn.k_proj.weight", kv_out, H);
      mat(p + "self_attn.v_proj.weight", kv_out, H);
      mat(p + "self_attn.o_proj.weight", H, q_out);
      if (c.attention_bias) {
        w[p + "self_attn.q_proj.bias"] = at::zeros({gated ? 2 * q_out : q_out});
        w[p + "self_attn.k_proj.bias"] = at::zeros({kv_out});
        w[p + "self_attn.v_proj.bias"] = at::zeros({kv_out});
        w[p + "self_attn.o_proj.bias"] = at::zeros({H});
      }
      if (c.qk_norm) {
        norm(p + "self_attn.q_norm.weight", D);
        norm(p + "self_attn.k_norm.weight", D);
      }
    }
    if (c.is_moe_layer(i)) {  // the fused expert layout (moe_weights.h)
      const MoeConfig& m = c.moe;
      mat(p + "mlp.gate.weight", m.num_experts, H);
      w[p + "mlp.experts.gate_up_proj"] = at::randn({m.num_experts, 2 * m.expert_intermediate, H}, gen) / std::sqrt(double(H));
      w[p + "mlp.experts.down_proj"] =
          at::randn({m.num_experts, H, m.expert_intermediate}, gen) / std::sqrt(double(m.expert_intermediate));
      if (m.shared_intermediate > 0) {
        mat(p + "mlp.shared_expert.gate_proj.weight", m.shared_intermediate, H);
        mat(p + "mlp.shared_expert.up_proj.weight", m.shared_intermediate, H);
        mat(p + "mlp.shared_expert.down_proj.weight", H, m.shared_intermediate);
        mat(p + "mlp.shared_expert_gate.weight", 1, H);
      }
      continue;
    }
    mat(p + "mlp.gate_proj.weight", I, H);
    mat(p + "mlp.up_proj.weight", I, H);
    mat(p + "mlp.down_proj.weight", H, I);
    if (c.mlp_bias) {
      w[p + "mlp.gate_proj.bias"] = at::zeros({I});
      w[p + "mlp.up_proj.bias"] = at::zeros({I});
      w[p + "mlp.down_proj.bias"] = at::zeros({H});
    }
  }
  TargetConfig named = c;
  named.weight_prefix = "model.";
  return TargetModel::from_weights(
      named, [&](const std::string& n) { return w.at(n); }, [&](const std::string& n) { return w.count(n) > 0; },
      options);
}

}  // namespace dflash::models
