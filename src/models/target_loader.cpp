#include "target_loader.h"

#include <filesystem>
#include <stdexcept>

namespace dflash::models {

TargetModel load_target(const std::string& path, const TargetLoadOptions& options) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return TargetModel::load_hf(path, options);
  if (!fs::exists(path)) throw std::runtime_error("target model '" + path + "': no such file or folder");
  throw std::runtime_error("target model '" + path +
                           "': expected a Hugging Face folder with config.json and safetensors weights");
}

}  // namespace dflash::models
