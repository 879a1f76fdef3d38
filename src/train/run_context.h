// Phase 1 of a training run ("open the run"): where things live and compute, who leads, and the state a
// resumed run starts from. Read before anything heavy loads, so a bad run directory or device fails fast.
#pragma once
#include <memory>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "checkpoint.h"
#include "device_layout.h"
#include "distributed.h"
#include "run_settings.h"
#include "train_config.h"

namespace dflash::train {

struct RunContext {
  std::vector<at::Device> drafter_devices;  // this process's: one worker thread each
  models::DeviceLayout target_layout;       // this process's replicas x pipeline stages of the online target
  // Where gradients are summed, clipped and applied (master weights, AdamW state): the first drafter device
  // when every worker is on CUDA (no host round trip; NCCL reduces there), else the CPU.
  at::Device grad_device = at::kCPU;
  std::unique_ptr<Collective> coll;
  bool lead = true;                    // rank 0 writes files and logs
  at::ScalarType compute = at::kBFloat16, master_dtype = at::kFloat;
  at::ScalarType target_compute = at::kFloat;  // target_dtype
  // The node's devices as the config names them (before the slice above): the memory check counts a device's
  // workers over the whole node. Parsed once here; later phases take these, not the text.
  RunDevices node;
  std::unique_ptr<TrainState> resume;  // the checkpoint a --resume run continues from
};

// Checks devices and dtypes, joins the process group, creates cfg.out and loads the resume checkpoint (or
// refuses a directory that already holds checkpoints without --resume).
RunContext open_run(const TrainConfig& cfg);

// torchrun starts LOCAL_WORLD_SIZE processes per node, and a device list names the node's devices: process
// LOCAL_RANK takes the local_rank-th of local_world equal slices (cuda:0,cuda:1,cuda:2,cuda:3 over 2 processes:
// cuda:0,cuda:1 and cuda:2,cuda:3). A single cpu entry is shared when `share_single_cpu` (the target on the
// CPU); any other length that does not divide evenly is an error naming `what`.
std::vector<at::Device> local_devices(const std::vector<at::Device>& node, int64_t local_rank, int64_t local_world,
                                      const std::string& what, bool share_single_cpu);
// The same for a target layout: several replicas are divided among the processes (each takes R / P consecutive
// replicas; R must be a multiple of P); a single replica's stages are divided as a flat list is (a single cpu
// shared), so a layout without ';' slices as it always did.
models::DeviceLayout local_target_layout(const models::DeviceLayout& node, int64_t local_rank, int64_t local_world,
                                         const std::string& what);
// A CUDA device may not run the target and a drafter worker at once (both would need its memory); the error
// names both keys and the device.
void check_target_and_drafter_apart(const models::DeviceLayout& target, const std::vector<at::Device>& drafter,
                                    const std::string& target_spec, const std::string& drafter_spec);

}  // namespace dflash::train
