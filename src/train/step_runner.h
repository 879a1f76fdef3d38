// Phases 4 and 5 of a training run: the drafter replicas (one worker thread, device and weight copy each) and
// one optimizer step over them. A step: every worker computes loss and gradients of its micro-batches; the
// main thread sums the gradients in worker order (deterministic), all-reduces them and the step's statistics
// across processes, normalises by the step's total loss weight, checks that loss and gradient norm are finite,
// clips, applies AdamW to the master weights and copies them into the replicas.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <optional>

#include "attention_selfcheck.h"
#include "drafter_attention.h"
#include "loss_selfcheck.h"
#include "drafter_model.h"
#include "family_training.h"
#include "master_state.h"
#include "run_context.h"
#include "step_producer.h"
#include "target_setup.h"
#include "train_log.h"
#include "worker_thread.h"

namespace dflash::train {

// Hooks for tests that drive a whole run; they are passed in (the CLI reads them from its environment).
struct TrainHooks {
  int fail_worker = -1;            // this worker throws during its step (error propagation)
  int64_t kill_in_save_step = -1;  // SIGKILL between writing and renaming the checkpoint of this step
  bool dump_rank_weights = false;  // every rank writes its final master weights (ranks stay identical)
  bool keep_gradients = false;     // StepOutcome::gradients: the step's gradients before clipping (split tests)
};

// A step whose loss or gradient norm is NaN or Inf: the master weights were not updated.
struct DivergedError : std::runtime_error {
  DivergedError(int64_t step, double loss, double grad_norm);
  int64_t step;
};

struct StepOutcome {
  StepMetrics metrics;
  bool stop = false;  // some process asked to stop (SIGINT)
  std::vector<at::Tensor> gradients;  // TrainHooks::keep_gradients: master params' order, normalised, not clipped
};

// How a run uses the drafter's attention, for the one chooser (drafter_attention.h): max_len tokens of context,
// packed rows when `pack` is on, forward and backward.
drafter::DrafterAttentionUse run_attention_use(const TrainConfig& cfg);
// The self-check's shapes for a run on `device` (what choose_attention() checks, and `dflash doctor --config`).
std::vector<ops::AttentionCheckSpec> run_attention_specs(const TrainConfig& cfg, const drafter::DrafterConfig& d,
                                                         at::ScalarType compute, at::Device device);

class StepRunner {
 public:
  StepRunner(const TrainConfig& cfg, const RunContext& run, const TargetSide& side, MasterState& master,
             const TrainHooks& hooks);
  ~StepRunner();
  // Before the first step: each device's attention backend from cfg.attention_backend. auto and fused run the
  // fused-vs-reference self-check at this run's shapes (max_len, heads, head_dim, block size, every distinct
  // window, dtype, packed rows when `pack` is on; forward and backward) on the device, in the thread of its first
  // worker, all devices at once. One choice per distinct device; `fused` failing its check throws.
  std::vector<ops::AttentionChoice> choose_attention();
  // Before the first step, when CPU workers would use the loss's fused cross-entropy kernel (fp32/bf16, hard
  // labels): the kernel checked against the loss's generic path at this run's hidden size and head rows, on the
  // first CPU worker; a failure makes every worker use the generic path. Empty when no check applies.
  std::optional<ops::LossCheckResult> check_loss_kernel();
  // One optimizer step (0-based `step`) over `item`; `stop_here`: this process wants to stop after it.
  StepOutcome step(const StepItem& item, int64_t step, int64_t total_steps, bool stop_here);
  // Seconds the workers have spent computing so far (forward + backward), averaged over the workers.
  double busy_seconds() const;
  // The loss as run_loss_options resolved it once for this run (the producer takes its gamma from here).
  const drafter::DrafterLossOptions& loss_options() const { return loss_; }

 private:
  struct Replica {
    at::Device device = at::kCPU;
    drafter::DrafterWeights w;
    std::vector<at::Tensor> params;  // w.named() order
    drafter::FrozenTarget frozen;
    ops::AttentionBackend attention = ops::AttentionBackend::Fused;  // set by choose_attention()
  };
  struct WorkerOut {
    std::vector<at::Tensor> grads;  // master dtype, on the gradient device, w.named() order
    double loss_sum = 0;            // sum over micro-batches of loss_mb * (weight_mb + eps): sum(w * loss_row)
    double weight = 0;              // sum over micro-batches of the weight each loss divided by
    at::Tensor slot_correct, slot_count;
    double out_of_vocab = 0, label_rows = 0;  // loss rows whose target is outside the draft vocabulary / all
    at::Tensor family_sums;                    // sum of the family's metric sums (family_training.h), or undefined
    double seconds = 0;                        // wall time of the worker's share of the step
  };
  WorkerOut run_worker(int index, const std::vector<const MicroBatch*>& micro);

  const TrainConfig& cfg_;
  const RunContext& run_;
  const drafter::DrafterConfig dcfg_;
  const drafter::FamilyTraining& family_;  // the family's objective options and metric terms
  MasterState& master_;
  TrainHooks hooks_;
  drafter::DrafterLossOptions loss_;
  drafter::CheckpointPolicy checkpointing_;
  std::vector<Replica> replicas_;
  std::vector<std::unique_ptr<WorkerThread>> workers_;
  std::vector<double> busy_;  // per worker, seconds computed so far
  at::Tensor draft_table_;  // draft vocabulary: target id -> draft id or -1 ([V] int64, CPU); undefined: full
};

}  // namespace dflash::train
