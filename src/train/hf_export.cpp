#include "hf_export.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "atomic_file.h"

namespace dflash::train {
namespace fs = std::filesystem;
namespace {

std::string dtype_name(at::ScalarType dt) {
  switch (dt) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return "float32";
  }
}

// transformers' Qwen3Config default, written when the target's context length is unknown (a GGUF without
// context_length, or a drafter config file without the field): only RoPE scaling would read it.
constexpr int64_t kDefaultMaxPositions = 32768;

}  // namespace

nlohmann::json hf_drafter_config_json(const drafter::DrafterConfig& c, at::ScalarType dtype) {
  nlohmann::json j = drafter::drafter_config_to_json(c);
  j.erase("torch_dtype");  // transformers 5 reads `dtype`
  j["dtype"] = dtype_name(dtype);
  j["max_position_embeddings"] = c.max_position_embeddings > 0 ? c.max_position_embeddings : kDefaultMaxPositions;
  j["auto_map"] = {{"AutoModel", "dflash.DFlashDraftModel"}};
  return j;
}

void write_hf_drafter_folder(const std::string& out_dir, const drafter::DrafterConfig& c,
                             const drafter::DrafterWeights& w, at::ScalarType dtype) {
  c.validate("drafter config to export to " + out_dir);
  fs::create_directories(out_dir);
  // Weights first: a folder whose config.json exists is complete.
  drafter::save_drafter_weights((fs::path(out_dir) / "model.safetensors").string(), w, dtype);
  data::write_file_atomic((fs::path(out_dir) / "dflash.py").string(), hf_remote_code_source());
  data::write_file_atomic((fs::path(out_dir) / "config.json").string(), hf_drafter_config_json(c, dtype).dump(2) + "\n");
}

}  // namespace dflash::train
