// Phase 2 of a training run ("load the target"): the training samples, the drafter config, and what the
// drafter borrows from the target (frozen embedding and LM head). Online data also keeps the whole target,
// which the step producer runs. The memory budget is checked before any weight is read.
#pragma once
#include <memory>

#include <c10/core/ScalarType.h>

#include "drafter_config.h"
#include "drafter_model.h"
#include "run_context.h"
#include "sample_source.h"
#include "target_model.h"
#include "train_config.h"

namespace dflash::train {

struct TargetSide {
  std::unique_ptr<SampleSource> samples;
  std::unique_ptr<models::TargetModel> target;  // null when only the frozen matrices are read (offline data)
  drafter::FrozenTarget frozen;                 // CPU copies
  drafter::DrafterConfig dcfg;
};

// The drafter's dtype (run.compute) sizes the budget check; the online target runs on run.target_devices.
TargetSide load_target_side(const TrainConfig& cfg, const RunContext& run);

// The drafter config: cfg.drafter_config's file, else derived from the target's architecture (hidden/heads/MLP
// of the target, cfg.drafter_layers layers, SPEC default target_layer_ids).
drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& target);

// Drafter layer i <- target layer first + i, tensor by tensor (init_from_target_layer).
void copy_target_layers(const models::TargetModel& target, int64_t first, drafter::DrafterWeights& w);

}  // namespace dflash::train
