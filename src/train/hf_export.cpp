#include "hf_export.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

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
  const fs::path out(out_dir);
  if (fs::exists(out) && !fs::is_directory(out)) throw std::invalid_argument(out_dir + ": exists and is not a folder");
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  // Everything is written into a hidden folder beside the output first, so a failure (a full disk, an
  // interrupted run) leaves neither an empty nor a partial export behind.
  const fs::path stage = parent / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  const char* files[] = {"model.safetensors", "dflash.py", "config.json"};  // config.json last: it completes a folder
  auto clean_stage = [&] {
    std::error_code ec;
    for (const char* f : files) fs::remove(stage / f, ec);
    fs::remove(stage, ec);
  };
  clean_stage();
  try {
    fs::create_directory(stage);
    drafter::save_drafter_weights((stage / files[0]).string(), w, dtype);
    data::write_file_atomic((stage / files[1]).string(), hf_remote_code_source());
    data::write_file_atomic((stage / files[2]).string(), hf_drafter_config_json(c, dtype).dump(2) + "\n");
    if (!fs::exists(out)) {
      fs::rename(stage, out);  // the whole folder appears at once
    } else {  // replacing an earlier export: file by file, each rename atomic, the config last
      for (const char* f : files) fs::rename(stage / f, out / f);
      fs::remove(stage);
    }
    data::fsync_dir(out.string());
    data::fsync_dir(parent.string());
  } catch (...) {
    clean_stage();
    throw;
  }
}

}  // namespace dflash::train
