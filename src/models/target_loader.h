// One entry point for loading a target from disk, whatever the format.
#pragma once
#include <string>

#include "target_model.h"

namespace dflash::models {

// A Hugging Face folder (config.json + safetensors) or, when GGUF support is built, a .gguf file.
TargetModel load_target(const std::string& path, const TargetLoadOptions& options = {});

}  // namespace dflash::models
