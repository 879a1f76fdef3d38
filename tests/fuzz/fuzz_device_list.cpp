// The device grammar (util/device_list.h): target layouts (replicas ';', stages ','), drafter lists and single
// devices. Each input is refused with a one-line error naming the key, or parses to devices that satisfy the
// documented rules and whose canonical spelling parses back to the same devices.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "device_list.h"
#include "fuzz_common.h"

namespace {

using dflash::util::DeviceGrid;
using dflash::util::DeviceName;
constexpr const char* kWhere = "fuzz-devices";

bool has_control(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

// Runs `f`; a refusal must be a std::invalid_argument of one printable line naming kWhere. Returns whether it parsed.
template <typename F>
bool parsed(F&& f) {
  try {
    f();
    return true;
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    if (m.rfind(std::string(kWhere) + ": ", 0) != 0) dflash::fuzz::violated("error without the key first: " + m);
    if (has_control(m)) dflash::fuzz::violated("error with a control byte (not one printable line): " + m);
    return false;
  }
}

void check_device(const DeviceName& d, const std::string& spec) {
  if (d.index < 0 || d.index > dflash::util::kMaxDeviceIndex || (!d.cuda && d.index != 0))
    dflash::fuzz::violated("device index out of range from '" + spec + "': " + d.str());
}

void check_grid(const DeviceGrid& g, const std::string& spec) {
  if (has_control(spec)) dflash::fuzz::violated("a spec with a control byte was accepted");
  if (g.replicas.empty()) dflash::fuzz::violated("no replica from '" + spec + "'");
  for (size_t r = 0; r < g.replicas.size(); ++r) {
    if (g.replicas[r].size() != g.replicas.front().size() || g.replicas[r].empty())
      dflash::fuzz::violated("replicas of different or zero stage counts from '" + spec + "'");
    for (const DeviceName& d : g.replicas[r]) {
      check_device(d, spec);
      for (size_t q = 0; q < r; ++q)
        for (const DeviceName& e : g.replicas[q])
          if (d.cuda && d == e) dflash::fuzz::violated(d.str() + " in two replicas from '" + spec + "'");
    }
  }
  // The pieces separated by ';' and ',' are exactly the devices: none was dropped or invented.
  size_t semis = 0, commas = 0, devices = 0;
  for (const char c : spec) semis += c == ';', commas += c == ',';
  for (const auto& r : g.replicas) devices += r.size();
  if (g.replicas.size() != semis + 1 || devices != semis + commas + 1)
    dflash::fuzz::violated("entries dropped or invented from '" + spec + "' -> '" + g.str() + "'");
  DeviceGrid again;
  if (!parsed([&] { again = dflash::util::parse_device_grid(g.str(), kWhere); }))
    dflash::fuzz::violated("canonical spelling '" + g.str() + "' of '" + spec + "' is refused");
  if (again.replicas != g.replicas) dflash::fuzz::violated("'" + g.str() + "' does not round-trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  DeviceGrid grid;
  if (parsed([&] { grid = dflash::util::parse_device_grid(spec, kWhere); })) check_grid(grid, spec);

  std::vector<DeviceName> list;
  if (parsed([&] { list = dflash::util::parse_device_list(spec, kWhere); })) {
    // A drafter list is a one-replica layout whose devices may repeat.
    if (spec.find(';') != std::string::npos) dflash::fuzz::violated("a ';' in a device list was accepted");
    DeviceGrid one;
    one.replicas.push_back(list);
    check_grid(one, spec);
    std::vector<DeviceName> again;
    if (!parsed([&] { again = dflash::util::parse_device_list(one.str(), kWhere); }) || again != list)
      dflash::fuzz::violated("list '" + one.str() + "' does not round-trip");
  }

  DeviceName one;
  if (parsed([&] { one = dflash::util::parse_one_device(spec, kWhere); })) {
    if (spec.find_first_of(",;") != std::string::npos || has_control(spec))
      dflash::fuzz::violated("'" + spec + "' accepted as one device");
    check_device(one, spec);
    if (dflash::util::parse_one_device(one.str(), kWhere) != one) dflash::fuzz::violated(one.str() + " does not round-trip");
  }
  return 0;
}
