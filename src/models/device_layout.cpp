#include "device_layout.h"

#include <stdexcept>

#include "compute_settings.h"
#include "device_list.h"

namespace dflash::models {

bool DeviceLayout::all_cpu() const {
  for (const auto& r : replicas)
    for (const auto& d : r)
      if (!d.is_cpu()) return false;
  return true;
}

std::string DeviceLayout::str() const { return util::spell_device_grid(replicas); }

namespace {

DeviceLayout layout_of(const util::DeviceGrid& grid) {
  DeviceLayout layout;
  for (const auto& replica : grid.replicas) {
    layout.replicas.emplace_back();
    for (const util::DeviceName& d : replica) layout.replicas.back().push_back(ops::device_of(d));
  }
  return layout;
}

}  // namespace

DeviceLayout parse_device_layout_spelling(const std::string& spec, const std::string& where) {
  return layout_of(util::parse_device_grid(spec, where));
}

DeviceLayout parse_device_layout(const std::string& spec, const std::string& where) {
  return device_layout_of(util::read_device_grid_setting(spec, where), where);
}

DeviceLayout device_layout_of(const util::DeviceGridSetting& spec, const std::string& where) {
  const DeviceLayout layout = layout_of(spec.grid);
  for (const auto& replica : layout.replicas)
    for (const at::Device& d : replica)  // naming the list and the entry
      ops::check_device_available(d, d.str(),
                                  d.str() == spec.text ? where : where + " " + util::quoted_device_text(spec.text));
  return layout;
}

DeviceLayout cpu_layout(int64_t stages) {
  DeviceLayout l;
  l.replicas.assign(1, std::vector<at::Device>(size_t(stages), at::Device(at::kCPU)));
  return l;
}

}  // namespace dflash::models
