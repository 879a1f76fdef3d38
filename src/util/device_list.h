// The device grammar every command and config key spells devices in, parsed here once and torch-free (so the fuzz
// targets and TrainConfig::validate() use it too; ops/models turn the result into LibTorch devices and check that
// this machine has them).
//   device:  cpu | cpu:0 | cuda | cuda:N      (N: decimal, 0..kMaxDeviceIndex; cuda means cuda:0)
//   layout:  replicas separated by ';', the stages of a replica by ','; spaces around an entry are ignored
//            cuda:0,cuda:1;cuda:2,cuda:3   two replicas of two pipeline stages
//   list:    devices separated by ',' (one drafter worker each); a ';' is refused
// Rules of a layout: no empty entry, stage or replica (`cuda:0,,cuda:1`, `cpu;;cpu`, a trailing separator), no control
// character anywhere, every replica with the same stage count, a CUDA device in one replica at most (cpu may repeat).
// Every error is one line: "<where>: <what>" naming the whole list and the offending entry, control bytes shown
// as \xNN.
#pragma once
#include <string>
#include <vector>

namespace dflash::util {

// LibTorch's device index is 8 bits (c10::DeviceIndex): a larger index would wrap onto another device.
inline constexpr int kMaxDeviceIndex = 127;

struct DeviceName {
  bool cuda = false;
  int index = 0;  // 0 for cpu
  std::string str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
  bool operator==(const DeviceName& o) const { return cuda == o.cuda && index == o.index; }
  bool operator!=(const DeviceName& o) const { return !(*this == o); }
};

// Replicas of stages of devices spelt in the grammar above (';' between replicas, ',' between stages); any device
// type with str() (DeviceName here, at::Device in models::DeviceLayout).
template <class Device>
std::string spell_device_grid(const std::vector<std::vector<Device>>& replicas) {
  std::string out;
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (r) out += ';';
    for (size_t s = 0; s < replicas[r].size(); ++s) {
      if (s) out += ',';
      out += replicas[r][s].str();
    }
  }
  return out;
}

struct DeviceGrid {
  std::vector<std::vector<DeviceName>> replicas;  // replicas[r][s]: stage s of replica r
  std::string str() const { return spell_device_grid(replicas); }  // parses back to the same grid
};

// A layout (target_devices, --devices).
DeviceGrid parse_device_grid(const std::string& spec, const std::string& where);
// A flat list (drafter_devices): one replica; a ';' is refused.
std::vector<DeviceName> parse_device_list(const std::string& spec, const std::string& where);
// Exactly one device (eval --drafter-device, bench attention --device).
DeviceName parse_one_device(const std::string& spec, const std::string& where);

// A device setting read once (TrainConfig's drafter_devices, target_devices): the devices parsed where the setting
// is read, and the text as written, which errors quote (as util::ByteSize keeps its text).
struct DeviceListSetting {
  std::string text;
  std::vector<DeviceName> devices;
};
struct DeviceGridSetting {
  std::string text;
  DeviceGrid grid;
};
DeviceListSetting read_device_list_setting(const std::string& text, const std::string& where);
DeviceGridSetting read_device_grid_setting(const std::string& text, const std::string& where);

// `s` quoted for an error line: control and non-ASCII bytes as \xNN, so the message stays one printable line.
std::string quoted_device_text(const std::string& s);

}  // namespace dflash::util
