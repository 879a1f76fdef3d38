// The files a tiny training run reads, for the tests that run one: a tied Llama target (H 16, V 64, 2 layers) in
// HF layout with random weights, and a dflash-hidden-v1 shard of given samples.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "hidden_shards.h"
#include "safetensors.h"
#include "sample_source.h"

namespace dflash::train::test {

inline std::string write_tiny_target(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const int64_t V = 64, H = 16, I = 32, L = 2;
  std::ofstream(dir / "config.json") << R"({"model_type":"llama","architectures":["LlamaForCausalLM"],
    "vocab_size":64,"hidden_size":16,"intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":2,
    "num_key_value_heads":1,"rms_norm_eps":1e-6,"rope_theta":10000.0,"tie_word_embeddings":true,
    "max_position_embeddings":128,"bos_token_id":1,"eos_token_id":2})";
  at::manual_seed(1);
  std::vector<std::pair<std::string, at::Tensor>> w{{"model.embed_tokens.weight", at::randn({V, H})},
                                                    {"model.norm.weight", at::ones({H})}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.emplace_back(p + "input_layernorm.weight", at::ones({H}));
    w.emplace_back(p + "post_attention_layernorm.weight", at::ones({H}));
    w.emplace_back(p + "self_attn.q_proj.weight", at::randn({H, H}) * 0.2);
    w.emplace_back(p + "self_attn.k_proj.weight", at::randn({8, H}) * 0.2);
    w.emplace_back(p + "self_attn.v_proj.weight", at::randn({8, H}) * 0.2);
    w.emplace_back(p + "self_attn.o_proj.weight", at::randn({H, H}) * 0.2);
    w.emplace_back(p + "mlp.gate_proj.weight", at::randn({I, H}) * 0.2);
    w.emplace_back(p + "mlp.up_proj.weight", at::randn({I, H}) * 0.2);
    w.emplace_back(p + "mlp.down_proj.weight", at::randn({H, I}) * 0.2);
  }
  io::save_safetensors((dir / "model.safetensors").string(), w);
  return dir.string();
}

// One dflash-hidden-v1 shard of `samples` (through the format's one writer, data/hidden_shards.h).
inline void write_dflash_shard(const std::string& path, const std::vector<data::Sample>& samples,
                               const std::vector<int64_t>& target_layer_ids, int64_t hidden_size) {
  std::vector<data::HiddenSample> h;
  for (const auto& s : samples) h.push_back({s.input_ids, s.loss_mask, s.features, s.last_hidden});
  data::HiddenMeta m;
  m.target_layer_ids = target_layer_ids;
  m.hidden_size = hidden_size;
  data::write_hidden_shard(path, h, m);
}

}  // namespace dflash::train::test
