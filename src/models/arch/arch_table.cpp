#include <stdexcept>

#include "arch_rows.h"

namespace dflash::models {

const std::vector<const TargetArchRow*>& target_arch_rows() {
  // One row per TargetArch, in enum order (both from arch_list.h): a new architecture is its file
  // (arch/<name>_arch.cpp) and its line there.
#define DFLASH_TARGET_ARCH_ROW(name) &name##_arch(),
  static const std::vector<const TargetArchRow*> rows = {DFLASH_TARGET_ARCHS(DFLASH_TARGET_ARCH_ROW)};
#undef DFLASH_TARGET_ARCH_ROW
  return rows;
}

const TargetArchRow& target_arch_row(TargetArch arch) {
  const auto& rows = target_arch_rows();
  const size_t i = static_cast<size_t>(arch);
  if (i >= rows.size() || rows[i]->info.arch != arch)
    throw std::logic_error("target_arch_row: no row for architecture " + std::to_string(i));
  return *rows[i];
}

const std::vector<TargetArchInfo>& target_archs() {
  static const std::vector<TargetArchInfo> infos = [] {
    std::vector<TargetArchInfo> out;
    for (const TargetArchRow* r : target_arch_rows()) out.push_back(r->info);
    return out;
  }();
  return infos;
}

const TargetArchInfo& target_arch_info(TargetArch arch) {
  target_arch_row(arch);  // throws for a value without a row
  return target_archs()[static_cast<size_t>(arch)];
}

const char* target_arch_name(TargetArch arch) { return target_arch_info(arch).name; }

}  // namespace dflash::models
