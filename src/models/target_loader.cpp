#include "target_loader.h"

#include <filesystem>
#include <stdexcept>

#include "target_gguf.h"

namespace dflash::models {
namespace {

bool is_gguf(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

}  // namespace

TargetModel load_target(const std::string& path, const TargetLoadOptions& options) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return TargetModel::load_hf(path, options);
  if (!fs::exists(path)) throw std::runtime_error("target model '" + path + "': no such file or folder");
  if (is_gguf(path)) return load_gguf_target(path, options);
  throw std::runtime_error("target model '" + path +
                           "': expected a Hugging Face folder (config.json + safetensors) or a .gguf file");
}

TargetConfig read_target_config(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return load_target_config(path);
  if (is_gguf(path) && fs::exists(path)) return gguf_target_config(io::GGUFFile::open(path));
  throw std::runtime_error("target model '" + path +
                           "': expected a Hugging Face folder (config.json + safetensors) or a .gguf file");
}

}  // namespace dflash::models
