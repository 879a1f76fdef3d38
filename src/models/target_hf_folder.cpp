#include "target_hf_folder.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "atomic_output.h"
#include "gguf.h"
#include "rope_config.h"
#include "target_gguf.h"
#include "tokenizer.h"
#include "tokenizer_json_writer.h"

namespace dflash::models {

namespace {

using json = nlohmann::json;

json token_ids(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  return ids.size() == 1 ? json(ids[0]) : json(ids);
}

// config.json as transformers writes it for the architecture (the fields its config class reads).
json hf_config_json(const TargetConfig& c, const std::string& path) {
  const TargetArchInfo& info = c.info();
  if (!info.hf_class)
    throw std::invalid_argument(path + ": model type '" + info.name +
                                "' has no config.json form here (expected llama, qwen3 or qwen3_moe)");
  json j = {{"architectures", {info.hf_class}},
            {"model_type", info.name},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope.theta},
            {"rope_scaling", rope_scaling_json(c.rope)},
            {"attention_bias", c.attention_bias},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", token_ids(c.bos_token_ids)},
            {"eos_token_id", token_ids(c.eos_token_ids)}};
  if (info.mlp_bias_field) j["mlp_bias"] = c.mlp_bias;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.moe.num_experts > 0) {
    j["num_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["moe_intermediate_size"] = c.moe.expert_intermediate;
    j["norm_topk_prob"] = c.moe.norm_topk_prob;
    j["decoder_sparse_step"] = c.moe.sparse_step;
    j["mlp_only_layers"] = c.moe.mlp_only_layers;
  }
  return j;
}

}  // namespace

void write_target_hf_folder(const std::string& gguf_path, const std::string& out_dir) {
  const io::GGUFFile file = io::GGUFFile::open(gguf_path);
  const TargetConfig config = gguf_target_config(file);
  const json cfg = hf_config_json(config, gguf_path);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_gguf(file);  // throws naming the file for a non-BPE vocab
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path dir(out_dir);
  io::write_file_atomically((dir / "config.json").string(), cfg.dump(2) + "\n");
  io::write_file_atomically((dir / "tokenizer.json").string(), tok::tokenizer_json_text(tokenizer));
  io::write_file_atomically((dir / "tokenizer_config.json").string(),
                            tok::tokenizer_config_json_text(tokenizer, config.max_position_embeddings));
}

}  // namespace dflash::models
