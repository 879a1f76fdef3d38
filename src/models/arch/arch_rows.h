// The table of target architectures (arch_table.cpp): one row per TargetArch, each defined in its own file
// (arch/<name>_arch.cpp) with its config.json reader, its transformers defaults and the checks only it has. The
// generic code (target_config.cpp, the loaders, the model, the cost) reads a row's TargetArchInfo.
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

// Each architecture's row, defined in its file.
const TargetArchRow& llama_arch();
const TargetArchRow& qwen3_arch();
const TargetArchRow& qwen3_moe_arch();
const TargetArchRow& qwen3_5_arch();      // qwen3_5_arch.cpp, beside
const TargetArchRow& qwen3_5_moe_arch();  // its MoE form
const TargetArchRow& gpt_oss_arch();

}  // namespace dflash::models
