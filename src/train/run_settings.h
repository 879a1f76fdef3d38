// The one reading of a run's settings that every start goes through: `dflash train` and `dflash doctor --config`
// both call validate_run_settings, so doctor passes exactly the configs train accepts and names the same error
// (issue 36: doctor used to pass target_devices such as 'cpu;;cpu' or 'gpu:0' that train refused).
#pragma once
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "device_layout.h"
#include "train_config.h"

namespace dflash::train {

// The node's devices as the config names them (before torchrun's per-process slicing).
struct RunDevices {
  std::vector<at::Device> drafter;
  models::DeviceLayout target;
};

// The device lists: drafter_devices, target_devices (replicas ';', stages ','), and a GPU not on both sides.
RunDevices parse_run_devices(const TrainConfig& cfg);

// The drafter family (resolved from the drafter config, refused when it cannot run yet; `command` prefixes those
// messages), TrainConfig::validate() and parse_run_devices. Throws the first problem as one line.
RunDevices validate_run_settings(TrainConfig& cfg, const std::string& command);

}  // namespace dflash::train
