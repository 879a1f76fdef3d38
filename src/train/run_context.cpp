#include "run_context.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "compute_settings.h"

namespace dflash::train {

RunContext open_run(const TrainConfig& cfg) {
  RunContext run;
  run.drafter_devices = ops::parse_devices(cfg.drafter_devices, "train config: 'drafter_devices'");
  ops::parse_devices(cfg.target_devices, "train config: 'target_devices'");  // checked now, used when loading
  bool all_cuda = true;
  for (const auto& d : run.drafter_devices) all_cuda = all_cuda && d.is_cuda();
  run.grad_device = all_cuda ? run.drafter_devices.front() : at::Device(at::kCPU);
  run.compute = ops::parse_dtype(cfg.dtype, "train config: 'dtype'");
  if (run.compute == at::kHalf)
    throw std::invalid_argument("train config: 'dtype' fp16 is not supported for training (use bf16, fp32 or fp64)");
  run.master_dtype = run.compute == at::kDouble ? at::kDouble : at::kFloat;
  run.coll = collective_from_env(cfg.dist_backend, run.grad_device);
  run.lead = run.coll->rank() == 0;
  std::filesystem::create_directories(cfg.out);
  if (cfg.resume) {
    std::string path;
    run.resume = std::make_unique<TrainState>(load_latest_checkpoint(cfg.out, &path));
    if (run.lead) std::fprintf(stderr, "resuming from %s (step %lld)\n", path.c_str(), (long long)run.resume->step);
  } else if (has_checkpoint(cfg.out)) {
    throw std::invalid_argument(cfg.out + ": already holds checkpoints; pass --resume to continue or use a new --out");
  }
  return run;
}

}  // namespace dflash::train
