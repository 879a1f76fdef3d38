// Resumable outputs record the settings they were written with (a sidecar .meta.json, a shard index) so that a
// rerun with other settings is refused instead of mixing two kinds of data. Torch-free.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <string>

namespace dflash::data {

// A JSON file; an unreadable or invalid one is an error naming it.
nlohmann::json read_json_file(const std::string& path);
// Every key of `settings` must equal the one `recorded["settings"]` (or `recorded` itself when it has no
// "settings" object) holds; the first that differs is an error
// "<path>: written with <key> = <old>, this run has <new>; <hint>".
void check_recorded_settings(const nlohmann::json& recorded, const nlohmann::json& settings, const std::string& path,
                             const std::string& hint);

}  // namespace dflash::data
