// One spelling of the attention backend for every command, settings file and the Python package:
// auto | fused | reference (src/ops/attention_backend.h says what each means). Torch-free and header-only,
// so torch-free settings (train_config.cpp, also built into the fuzz targets) can check a name.
#pragma once
#include <stdexcept>
#include <string>

namespace dflash::util {

inline bool is_attention_backend_name(const std::string& name) {
  return name == "auto" || name == "fused" || name == "reference";
}

// `name` itself when it is one of the three; otherwise "<where>: expected auto, fused or reference, got '<name>'".
inline std::string checked_attention_backend(const std::string& name, const std::string& where) {
  if (!is_attention_backend_name(name))
    throw std::invalid_argument(where + ": expected auto, fused or reference, got '" + name + "'");
  return name;
}

}  // namespace dflash::util
