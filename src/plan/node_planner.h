// `dflash plan --node`: how to split one node's GPUs between the target (replicas x pipeline stages) and the
// drafter workers so that the most samples per second are trained, within each device's memory.
//
// The model, per training sample (one sequence of seq_len tokens, num_anchors blocks):
//  - time = FLOPs / (the GPU's dense bf16 rate x an efficiency factor); the target's forward FLOPs come from
//    models/target_cost.h, the drafter step's (forward + backward) from drafter_step_flops below;
//  - a replica of P stages, pipelined, delivers one sample per (its slowest stage's share of the forward) x the
//    forward time; R replicas deliver R times that; W drafter workers deliver W / step time;
//  - the node trains min(target rate, drafter rate) samples/s;
//  - a split fits when every target stage (models::target_stage_memory) and every drafter worker (the memory
//    planner's peak, with the cheapest activation checkpointing that fits; its recomputation is counted) stays
//    within `usable_memory` of a device.
// The efficiency factors are assumptions, not measurements of this code on a GPU (docs/TRAINING.md says where
// they come from; `dflash bench flops` measures the CPU's, which does not carry over to a GPU).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu_specs.h"
#include "memory_planner.h"
#include "target_config.h"
#include "target_cost.h"

namespace dflash::plan {

// FLOPs of one drafter training step (forward + backward) of plan settings `s` (its batch of sequences):
//   linear     the decoder layers' projections (q, o and MLP on the block tokens, k and v on context + blocks):
//              forward, then 2 x forward for the backward (input and weight gradients)
//   fc         the context projection from n target layers to hidden: forward + weight gradient (its input, the
//              target's features, needs none)
//   attention  each block query against its context (on average half the sequence, capped by a sliding window)
//              and its block: 4 x D per key and head forward, 2.5 x that backward (P recomputed from the LSE)
//   lm_head    the chunked loss: logits and d(hidden) in its forward (2 passes over rows x V), a third for the
//              teacher's logits when kl_weight > 0 or the family is DSpark (frozen head: no weight gradient), and
//              the family's own passes (its FamilyCost::flops, drafter/family_cost.h: DSpark's Markov bias, DFlash2's
//              top-K pass)
//   heads      the family's modules (FamilyCost::flops: DSpark's heads, DFlash2's convs and selector); 0 for DFlash
//   recompute  the forward of checkpointed layers (with DFlash2's convs), again during the backward
struct DrafterFlops {
  double linear = 0, fc = 0, attention = 0, lm_head = 0, heads = 0, recompute = 0;
  double total() const { return linear + fc + attention + lm_head + heads + recompute; }
};
DrafterFlops drafter_step_flops(const PlanSettings& s);

struct NodeSettings {
  models::TargetConfig target;
  PlanSettings drafter;            // the drafter (any family), sequence length, anchors, batch (1: per sample), dtype
  GpuSpec gpu;
  int64_t gpus = 8;
  int64_t target_dtype_bytes = 2;  // bf16
  double target_efficiency = 0.5;  // achieved / peak FLOP rate of the target forward
  double drafter_efficiency = 0.4; // ... and of a drafter step
  double usable_memory = 0.9;      // share of a device's memory a plan may fill (CUDA context, fragmentation)
};

struct NodeSplit {
  int64_t replicas = 0, stages = 0, workers = 0;
  double target_samples_per_s = 0, drafter_samples_per_s = 0, samples_per_s = 0;
  double target_stage_bytes = 0;   // the largest stage of a replica
  double drafter_bytes = 0;        // one worker's planned peak
  int64_t gpus_used() const { return replicas * stages + workers; }
};

struct NodePlan {
  NodeSettings settings;
  models::TargetFlops target_flops;   // one sample's forward
  DrafterFlops drafter_flops;         // one step of settings.drafter (with the checkpointing that fits)
  double target_seconds = 0;          // per sample, one replica, stages in turn
  double drafter_seconds = 0;         // per step of one worker
  MemoryPlan drafter_memory;          // the worker's plan (checkpointing / loss chunk chosen to fit)
  bool drafter_fits = false;
  std::vector<NodeSplit> splits;      // every split that fits, best first
  std::string why;                    // when none fits
};

// Throws std::invalid_argument for settings out of range (gpus < 2, non-positive rates or factors, ...).
NodePlan plan_node(const NodeSettings& s);
std::string format_node_plan(const NodePlan& p, size_t rows = 12);
nlohmann::json node_plan_to_json(const NodePlan& p);

}  // namespace dflash::plan
