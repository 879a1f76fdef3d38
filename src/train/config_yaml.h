// YAML settings files for `dflash train` (yaml-cpp, when the build found it). Kept apart from
// train_config.cpp so that only this file needs yaml-cpp's headers.
#pragma once
#include <string>

#include "train_config.h"

namespace dflash::train {

// Applies a YAML mapping of settings (`text`, read from `path`) to `c`, key by key in file order, with the
// JSON rules of apply_json; scalars are read as the field's kind. Errors name "path:LINE". Throws
// std::invalid_argument, also when this build has no yaml-cpp (saying how to get it).
void apply_yaml_settings(TrainConfig& c, const std::string& text, const std::string& path);
bool yaml_supported();

}  // namespace dflash::train
