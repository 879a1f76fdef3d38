// The targets this project knows by name ("target presets"). Each is that model's own config.json, kept in
// configs/targets/NAME.json and compiled in, so a new target is a new file there. They are read by the parser of
// every other config.json (parse_target_config), and each drafter planned for a preset comes from the function
// `dflash train` uses (drafter/drafter_from_target.h): one model name plans and trains one drafter.
#pragma once
#include <string>
#include <vector>

#include "target_config.h"

namespace dflash::models {

struct TargetPresetFile {
  const char* name;         // the file's name without .json: "qwen3.6-27b"
  const char* config_json;  // its text
};
// Every file of configs/targets/, sorted by name (generated at configure time: target_presets_table.cpp.in).
const std::vector<TargetPresetFile>& target_preset_files();

std::vector<std::string> target_preset_names();
bool is_target_preset(const std::string& name);
// The parsed config.json of a preset; an unknown name is an std::invalid_argument listing the presets.
TargetConfig target_preset(const std::string& name);

}  // namespace dflash::models
