// Whether a planned drafter step fits the memory of the device it will run on, asked before anything is allocated:
// `train` and `bench step` refuse a plan that exceeds what the device has available (they used to end in an
// allocator failure with a C++ stack trace at vocabulary 2^24 or hidden 8192), and `doctor --config` reports the
// same comparison as a row. DFLASH_TEST_AVAILABLE_MEMORY (a size like 4GB) stands in for the device's available
// memory, so tests do not depend on the machine they run on.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "memory_planner.h"

namespace dflash::plan {

// What a new allocation can still get on `device`: DFLASH_TEST_AVAILABLE_MEMORY when set, else the GPU's free
// memory (CUDA) or the RAM the kernel calls available (CPU). Throws std::invalid_argument for a malformed override.
double available_memory_bytes(at::Device device);

struct DeviceFit {
  double need_bytes = 0, available_bytes = 0;
  bool fits = true;
  // "planned peak 1.2 TB per worker (at loss forward) x 2 workers = 2.4 TB exceeds 7.5 GB available on cpu"
  std::string text;
};

// `workers` workers of `plan` on one device; `shared_bytes` of each plan are held once for all of them (the frozen
// embedding and LM head that workers on one device share; 0: nothing shared).
DeviceFit device_fit(const MemoryPlan& plan, at::Device device, int64_t workers, double shared_bytes = 0);

// Throws std::invalid_argument "<what>: <fit.text>; <hint>" when the plan does not fit.
void check_device_fit(const MemoryPlan& plan, at::Device device, int64_t workers, const std::string& what,
                      const std::string& hint, double shared_bytes = 0);

// More anchors than context positions is not a step (train's num_anchors is at most max_len too): throws
// std::invalid_argument "<anchors_name> must be at most <seq_name> (one anchor per context position), got 64
// anchors for 16 positions".
void check_step_shape(int64_t seq_len, int64_t anchors, const std::string& anchors_name, const std::string& seq_name);

}  // namespace dflash::plan
