// Where a target runs: one or more replicas (full copies of the model, each fed by its own thread), each split
// into the same number of pipeline stages, one device per stage. One spelling for every command and config key:
// replicas separated by ';', the stages of a replica by ','.
//   cuda:0                 one replica, one stage
//   cuda:0,cuda:1          one replica, two pipeline stages
//   cuda:0;cuda:1;cuda:2   three replicas
//   cuda:0,cuda:1;cuda:2,cuda:3   two replicas of two stages
//   cpu;cpu                two CPU replicas (a CPU may serve several replicas, which then share its weights)
// A CUDA device belongs to one replica at most (two replicas on one GPU would only take turns on it).
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device_list.h"

namespace dflash::models {

struct DeviceLayout {
  std::vector<std::vector<at::Device>> replicas;  // replicas[r][s]: the device of stage s of replica r

  int64_t num_replicas() const { return int64_t(replicas.size()); }
  int64_t num_stages() const { return replicas.empty() ? 0 : int64_t(replicas.front().size()); }
  bool all_cpu() const;
  std::string str() const;  // in the grammar above
};

// Parses and checks `spec` by the grammar and rules of util/device_list.h (the spelling of every device, no empty
// entry, replica or control character, the same stage count in every replica, no CUDA device in two replicas);
// then that every device exists on this machine. Errors are one line naming `where` (the key or flag), the list
// and the offending entry.
DeviceLayout parse_device_layout(const std::string& spec, const std::string& where);
// The same for a layout parsed already (a train setting): its devices, each checked to exist (errors quote its text).
DeviceLayout device_layout_of(const util::DeviceGridSetting& spec, const std::string& where);
// The same checks except the last: for a caller that reports a device this machine lacks itself (dflash doctor).
DeviceLayout parse_device_layout_spelling(const std::string& spec, const std::string& where);

// `stages` CPU stages of one replica (the --stages N of commands without --devices).
DeviceLayout cpu_layout(int64_t stages);

}  // namespace dflash::models
