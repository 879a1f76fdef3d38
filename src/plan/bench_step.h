// `dflash bench step` as a function (the command parses its flags into BenchStepOptions and calls
// run_bench_step): the seed's failing step -- drafter forward + backward + zero_grad with soft labels -- per
// checkpoint policy and per number of concurrent worker threads (one replica each, as the trainer runs them); time
// per iteration, measured peak memory (peak RSS increase, or the CUDA caching allocator's peak) against the memory
// planner's prediction, and whether every worker computed exactly what a lone worker does. Optional side-by-side
// rows: the generic cross-entropy, a draft vocabulary, the plain-PyTorch step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include "attention_backend.h"
#include "checkpoint_policy.h"
#include "drafter_config.h"

namespace dflash::plan {

struct BenchStepOptions {
  drafter::DrafterConfig drafter;  // a preset's (drafter_presets.h) or a config file's
  std::string model_name;          // how the report names it
  // The step's shape: the command fills it from drafter/run_shape.h's flags over the --model preset's shape; these
  // defaults are the CPU shapes' (drafter_presets.h cpu_step_shape) for callers that set only a few.
  int64_t seq_len = 1024, anchors = 64;
  at::ScalarType dtype = at::kFloat;
  double kl_weight = 0.15;
  int64_t loss_chunk_rows = 256, iters = 3;
  std::vector<int64_t> workers = {1};  // each count in [1, 64]
  std::vector<drafter::CheckpointPolicy> policies = {{0}, {2}, {1}};
  uint64_t seed = 0;
  bool cuda = false;          // the step on the current CUDA device (a build with CUDA)
  int64_t draft_vocab = 0;    // > 0: the first policy again over a draft vocabulary of this many rows
  bool reference = true;      // the plain-PyTorch step on the same shapes (CPU)
  bool generic_ce = true;     // the first policy again with the generic cross-entropy (dspark: its generic objective)
  bool objective_naive = true;  // the family's objective vs a naive one (FamilyModel::benchmark_objective)
  bool vs_dflash = true;      // dspark / dflash2: DFlash's step on the same shapes, measured and FLOP-floor ratios
  ops::AttentionBackend attention_backend = ops::AttentionBackend::Auto;
};

// The planner's promise: planned peak within 10% of the measured one (each run's "plan_within_10_percent"; the
// table says so under a run that misses it).
inline constexpr double kPlanTolerance = 0.10;
bool plan_within_tolerance(double planned, double measured);

// The family is o.drafter.family: dflash, dspark (its blocks, teacher and objective) or dflash2 (its convs and
// selector), each as training runs it. Prints the table as it goes and returns it as JSON: {"model", "device",
// "attention_backend", "settings", "runs": [{"policy", "workers", "mean_seconds", "measured_peak_bytes",
// "planned_peak_bytes", "ratio", "loss", ...}], "generic_ce", "draft_vocab", "reference", "<family>_objective"
// (FamilyModel::benchmark_objective, e.g. "dspark_objective"), "vs_dflash" ({"measured_ratio", "flop_floor_ratio",
// ...}: a family's step over DFlash's)}. Uses the calling thread's intra-op thread count.
nlohmann::json run_bench_step(const BenchStepOptions& o);

}  // namespace dflash::plan
