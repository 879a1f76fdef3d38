#include "target_presets.h"

#include <stdexcept>

namespace dflash::models {

std::vector<std::string> target_preset_names() {
  std::vector<std::string> out;
  for (const auto& f : target_preset_files()) out.push_back(f.name);
  return out;
}

bool is_target_preset(const std::string& name) {
  for (const auto& f : target_preset_files())
    if (name == f.name) return true;
  return false;
}

TargetConfig target_preset(const std::string& name) {
  for (const auto& f : target_preset_files())
    if (name == f.name) return parse_target_config(f.config_json, "preset '" + name + "' (configs/targets/" + name + ".json)");
  std::string names;
  for (const auto& n : target_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown target preset '" + name + "' (expected one of " + names + ")");
}

}  // namespace dflash::models
