// The table of target architectures (arch_table.cpp, from arch_list.h): one row per TargetArch, each defined in
// its own file (arch/<name>_arch.cpp) with its config.json reader, its transformers defaults, the checks only it
// has, and what its TargetArchInfo says of its weights and GGUF form. The generic code (target_config.cpp, the
// loaders, the model, the cost) reads a row's TargetArchInfo and never branches on the TargetArch value.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "target_config.h"

namespace dflash::models {

struct TargetArchRow {
  TargetArchInfo info;
  // config.json `j` (its model_type `type`, one of info.model_types) into `c` (c.arch set): the sizes, this
  // architecture's fields and transformers' defaults where the file is silent; throws naming the field.
  // TargetConfig::finish and validate follow.
  void (*parse)(const nlohmann::json& j, const std::string& type, const std::string& what, TargetConfig& c);
  // The checks only this architecture has, run by TargetConfig::validate after the shared ones (nullptr: none).
  void (*validate)(const TargetConfig& c, const std::string& what) = nullptr;
};

// The rows, in TargetArch order.
const std::vector<const TargetArchRow*>& target_arch_rows();
const TargetArchRow& target_arch_row(TargetArch arch);

// Each architecture's row, `<name>_arch()`, defined in its file (qwen3_5_moe_arch() in qwen3_5_arch.cpp, beside
// the dense form): one declaration per line of arch_list.h.
#define DFLASH_TARGET_ARCH_ROW(name) const TargetArchRow& name##_arch();
DFLASH_TARGET_ARCHS(DFLASH_TARGET_ARCH_ROW)
#undef DFLASH_TARGET_ARCH_ROW

}  // namespace dflash::models
