// Predicts the peak memory of one drafter training step before it runs. Every term is derived from what
// this library allocates and what its autograd nodes save (decoder_layer.cpp, norm_ops.cpp,
// src/ops/chunked_lm_loss_op.cpp, the attention op); the phase walk mirrors the order autograd frees and allocates.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anchor_attention.h"
#include "attention_backend.h"
#include "byte_size.h"
#include "checkpoint_policy.h"
#include "drafter_config.h"
#include "family_cost.h"
#include "run_shape.h"

namespace dflash::plan {

using util::human_bytes;  // the planner prints sizes as util/byte_size.h writes them

enum class PlanOptimizer { AdamW, Sgd, None };  // adamw | sgd | none: the optimizer state a step keeps
enum class PlanDevice { Cuda, Cpu };            // cuda | cpu: the attention backward workspace differs
std::optional<PlanOptimizer> plan_optimizer_from_text(const std::string& s);
std::optional<PlanDevice> plan_device_from_text(const std::string& s);
const char* plan_optimizer_name(PlanOptimizer o);
const char* plan_device_name(PlanDevice d);

struct PlanSettings {
  drafter::DrafterConfig cfg;
  int64_t batch = 1;
  int64_t seq_len = 0;        // S (context tokens per sequence)
  int64_t num_anchors = 0;    // N blocks per sequence (block size from cfg)
  int64_t dtype_bytes = 2;    // compute/weight dtype: 2 bf16/fp16, 4 fp32, 8 fp64
  drafter::CheckpointPolicy checkpoint;  // none
  int64_t loss_chunk_rows = drafter::RunShape{}.loss_chunk_rows;
  double kl_weight = drafter::RunShape{}.kl_weight;  // > 0: soft labels (teacher hidden input + a third logits buffer)
  PlanOptimizer optimizer = PlanOptimizer::AdamW;
  bool master_fp32 = true;    // fp32 master weights (only when dtype is narrower than fp32)
  PlanDevice device = PlanDevice::Cuda;
  int64_t cpu_dq_partitions = kernels::kDefaultDqPartitions;  // CPU attention backward: fp32 dQ partitions
  bool deterministic = false;  // CUDA: torch's deterministic algorithms, dQ without the fp32 accumulator
  // fused | reference (tiles of anchor_attention_reference.h) | auto (the larger: a run may fall back)
  ops::AttentionBackend attention_backend = ops::AttentionBackend::Auto;
};

struct PlanTerm {
  std::string name;
  double bytes = 0;
  std::string how;  // the formula in words
};

struct MemoryPlan {
  PlanSettings settings;
  std::vector<PlanTerm> terms;       // breakdown (resident at the peak, plus the peak's transient)
  std::vector<PlanTerm> phases;      // live bytes at each phase of the step
  double peak_bytes = 0;
  std::string peak_phase;
  int64_t params = 0;
};

// The step's shape (drafter/run_shape.h) onto `s`: seq_len = max_len, anchors, dtype, checkpoint policy, loss chunk,
// kl_weight; the block size stays the drafter config's (a command sets it when --block-size is given).
void set_run_shape(PlanSettings& s, const drafter::RunShape& shape);

MemoryPlan plan_memory(const PlanSettings& s);

// `s` as the family's cost hooks take it (drafter/family_cost.h).
drafter::StepCostShape cost_shape_of(const PlanSettings& s);
// Whether a step needs the target's final-normed last hidden state: soft labels (kl_weight > 0) or the family's own
// teacher (FamilyCost::needs_last_hidden: DSpark's L1). The producer captures and ships it; the LM head runs a third
// pass over it.
bool step_needs_last_hidden(const PlanSettings& s);

// --budget: the cheapest settings (least recomputation, then the largest loss chunk) whose peak fits.
// `fits` is false when nothing fits; `why` says what alone exceeds the budget.
struct BudgetChoice {
  bool fits = false;
  MemoryPlan plan;   // the chosen plan, or the smallest one when nothing fits
  std::string why;
};
BudgetChoice plan_for_budget(PlanSettings s, double budget_bytes);

nlohmann::json plan_to_json(const MemoryPlan& p);
std::string format_plan(const MemoryPlan& p);

}  // namespace dflash::plan
