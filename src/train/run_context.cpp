#include "run_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <ATen/Context.h>

#include "atomic_output.h"
#include "compute_settings.h"
#include "output_folder.h"
#include "run_settings.h"
#include "torchrun_env.h"

namespace dflash::train {

std::vector<at::Device> local_devices(const std::vector<at::Device>& node, int64_t local_rank, int64_t local_world,
                                      const std::string& what, bool share_single_cpu) {
  if (local_world < 1 || local_rank >= local_world)
    throw std::invalid_argument("environment: LOCAL_RANK " + std::to_string(local_rank) + " is not below LOCAL_WORLD_SIZE " +
                                std::to_string(local_world));
  if (local_world == 1) return node;
  if (share_single_cpu && node.size() == 1 && node.front().is_cpu()) return node;
  const int64_t n = int64_t(node.size());
  if (n % local_world != 0)
    throw std::invalid_argument(what + " lists " + std::to_string(n) + " devices for LOCAL_WORLD_SIZE=" +
                                std::to_string(local_world) + " processes on this node; list a multiple of " +
                                std::to_string(local_world) + " (each process takes an equal share, in order)");
  const int64_t k = n / local_world;
  return std::vector<at::Device>(node.begin() + local_rank * k, node.begin() + (local_rank + 1) * k);
}

models::DeviceLayout local_target_layout(const models::DeviceLayout& node, int64_t local_rank, int64_t local_world,
                                         const std::string& what) {
  models::DeviceLayout out;
  if (node.num_replicas() == 1) {
    out.replicas.push_back(local_devices(node.replicas.front(), local_rank, local_world, what, true));
    return out;
  }
  const int64_t R = node.num_replicas();
  if (local_world < 1 || local_rank >= local_world)
    throw std::invalid_argument("environment: LOCAL_RANK " + std::to_string(local_rank) + " is not below LOCAL_WORLD_SIZE " +
                                std::to_string(local_world));
  if (R % local_world != 0)
    throw std::invalid_argument(what + " '" + node.str() + "' lists " + std::to_string(R) +
                                " replicas for LOCAL_WORLD_SIZE=" + std::to_string(local_world) +
                                " processes on this node; list a multiple of " + std::to_string(local_world) +
                                " (each process takes an equal share of the replicas, in order)");
  const int64_t k = R / local_world;
  out.replicas.assign(node.replicas.begin() + local_rank * k, node.replicas.begin() + (local_rank + 1) * k);
  return out;
}

void check_target_and_drafter_apart(const models::DeviceLayout& target, const std::vector<at::Device>& drafter,
                                    const std::string& target_spec, const std::string& drafter_spec) {
  for (const auto& replica : target.replicas)
    for (const at::Device& d : replica)
      if (d.is_cuda() && std::find(drafter.begin(), drafter.end(), d) != drafter.end())
        throw std::invalid_argument("train config: " + d.str() + " is in 'target_devices' ('" + target_spec +
                                    "') and in 'drafter_devices' ('" + drafter_spec +
                                    "'); a GPU runs the target or drafter workers, not both");
}

RunContext open_run(const TrainConfig& cfg) {
  RunContext run;
  // `deterministic`: every op takes its deterministic implementation or refuses (torch's own switch, which the
  // CUDA attention reads too); cuBLAS needs a fixed workspace for it, set before its first handle exists.
  if (cfg.deterministic) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(cfg.deterministic, /*warn_only=*/false);
  const TorchrunEnv env = read_torchrun_env();  // the one reading of the torchrun variables
  const int64_t local_world = env.local_world, local_rank = env.local_rank;
  run.node = parse_run_devices(cfg);  // as doctor --config reads them (run_settings.h)
  run.drafter_devices = local_devices(run.node.drafter, local_rank, local_world, "train config: 'drafter_devices'", false);
  run.target_layout = local_target_layout(run.node.target, local_rank, local_world, "train config: 'target_devices'");
  bool all_cuda = true;
  for (const auto& d : run.drafter_devices) all_cuda = all_cuda && d.is_cuda();
  run.grad_device = all_cuda ? run.drafter_devices.front() : at::Device(at::kCPU);
  run.compute = ops::scalar_type(cfg.dtype);  // validate() refused fp16
  run.master_dtype = run.compute == at::kDouble ? at::kDouble : at::kFloat;
  run.target_compute = ops::scalar_type(cfg.target_dtype);
  run.coll = collective_from_env(env, cfg.dist_backend, run.grad_device);
  run.lead = run.coll->rank() == 0;
  // Checked now, created by run_training once every check has passed (a refused start leaves no folder).
  util::check_output_folder_use(cfg.out, "train config: 'out'", util::OutputFolderUse::Run);
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
