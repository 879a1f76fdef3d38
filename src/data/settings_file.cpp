#include "settings_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dflash::data {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": invalid JSON (" + e.what() + ")");
  }
}

void check_recorded_settings(const nlohmann::json& recorded, const nlohmann::json& settings, const std::string& path,
                             const std::string& hint) {
  const nlohmann::json empty = nlohmann::json::object();
  const bool nested = recorded.is_object() && recorded.contains("settings") && recorded["settings"].is_object();
  const nlohmann::json& old = nested ? recorded["settings"] : recorded.is_object() ? recorded : empty;
  for (const auto& [k, v] : settings.items())
    if (!old.contains(k) || old[k] != v)
      throw std::runtime_error(path + ": written with " + k + " = " + (old.contains(k) ? old[k].dump() : "?") +
                               ", this run has " + v.dump() + "; " + hint);
}

}  // namespace dflash::data
