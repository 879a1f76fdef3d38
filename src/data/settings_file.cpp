#include "settings_file.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"
#include "strict_json.h"

namespace dflash::data {

nlohmann::json read_json_file(const std::string& path) {
  std::string text;
  try {
    text = io::read_regular_file(path, 256 << 20);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  try {
    return io::parse_json_strict(text);
  } catch (const io::JsonError& e) {
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
