// One entry point for loading a target from disk, whatever the format.
#pragma once
#include <string>

#include "target_model.h"

namespace dflash::models {

// A Hugging Face folder (config.json + safetensors) or a llama.cpp .gguf file.
TargetModel load_target(const std::string& path, const TargetLoadOptions& options = {});
// Just the architecture (no weights), from config.json or GGUF metadata.
TargetConfig read_target_config(const std::string& path);

}  // namespace dflash::models
