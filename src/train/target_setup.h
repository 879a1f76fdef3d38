// Phase 2 of a training run ("load the target"): the training samples, the drafter config, and what the
// drafter borrows from the target (frozen embedding and LM head). Online data also keeps the whole target,
// which the step producer runs. The memory budget is checked before any weight is read.
#pragma once
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "drafter_config.h"
#include "drafter_model.h"
#include "memory_planner.h"
#include "run_context.h"
#include "sample_source.h"
#include "target_model.h"
#include "train_config.h"

namespace dflash::train {

struct TargetSide {
  std::unique_ptr<data::SampleSource> samples;
  std::unique_ptr<models::TargetModel> target;  // null when only the frozen matrices are read (offline data)
  // Online data with several replicas in target_devices: replicas 1.. (target is replica 0), copied from it.
  std::vector<std::unique_ptr<models::TargetModel>> more_replicas;
  drafter::FrozenTarget frozen;                 // CPU copies
  drafter::DrafterConfig dcfg;
  // draft_vocab > 0 (draft_vocab.h): the draft vocabulary's target ids [K] (CPU); frozen.lm_head is then the
  // target's rows of them [K, H]. Set by set_up_draft_vocab.
  at::Tensor draft_ids;
  // A fresh run's draft vocabulary counts [vocab] and head rows [K, H] (CPU): run_training writes
  // draft_vocab.safetensors from them once every check has passed (undefined: nothing to write).
  at::Tensor draft_counts, draft_lm_head;
};

// The target's replicas for the producer: target, then more_replicas (empty without a target).
std::vector<const models::TargetModel*> target_replicas(const TargetSide& side);

// The drafter's dtype (run.compute) sizes the budget check; the online target runs on run.target_layout, whose
// CUDA devices must each hold their stage (models::target_stage_memory for a batch_size x max_len micro-batch),
// checked before any weight is read.
TargetSide load_target_side(const TrainConfig& cfg, const RunContext& run);

// draft_vocab > 0: the draft vocabulary of a fresh run (counted over the training answers, the target's EOS ids kept;
// written to RUN_DIR/draft_vocab.safetensors by the lead's run_training, from side.draft_counts) or of the checkpoint a resumed run continues; restricts
// side.frozen.lm_head and sets side.dcfg.draft_vocab_size. Prints the answer-token coverage.
void set_up_draft_vocab(const TrainConfig& cfg, const RunContext& run, TargetSide& side);

// The drafter config: cfg.drafter_config's file, else derived from the target's architecture (hidden/heads/MLP
// of the target, cfg.drafter_layers layers, the default target_layer_ids of docs/DFLASH.md).
drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& target);
// The same with cfg.drafter_config's file already read (`file`; nullopt without one): a run reads it once.
drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& target,
                                              const std::optional<drafter::DrafterConfig>& file);

// Online data, before any weight is read: target_devices against the target's config: at most one pipeline stage
// per layer, and every CUDA stage device holds its stage (weights + a micro-batch's activations) in `target_dtype`.
void check_target_layout(const TrainConfig& cfg, const models::TargetConfig& tcfg, const drafter::DrafterConfig& d,
                         const models::DeviceLayout& layout, at::ScalarType target_dtype);

// Without reading any weights (what `dflash doctor --config` needs): the drafter config as above from the target's
// config (config.json or the GGUF header), then check_target_layout on the node's target_devices, so doctor fails
// the configs train fails once it has read the target; when the target's config cannot be read and
// cfg.drafter_config is given, the drafter config from its own shapes, as offline training of a target this project
// cannot run resolves it before reading the embedding (no target check then).
// `node`: the devices validate_run_settings parsed.
drafter::DrafterConfig resolve_drafter_config_from_files(const TrainConfig& cfg, const RunDevices& node);
// The target shapes a drafter config names (vocabulary, hidden size, layers, tied embeddings).
models::TargetConfig target_shapes_of(const drafter::DrafterConfig& d);

// The memory planner's settings for one worker of this run on a `device` of that kind.
plan::PlanSettings run_plan_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute,
                                     plan::PlanDevice device);
// `budget` (when set): the planned peak of one worker's micro-batch must fit it, else an std::invalid_argument
// naming both and the settings that would fit. Checked before any weight is read.
void check_budget(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute);
// Each drafter device once, in order, with the number of workers the node's drafter_devices (parsed) puts on it.
std::vector<std::pair<at::Device, int64_t>> drafter_device_workers(const std::vector<at::Device>& node_drafter);
// check_budget, then each drafter device: the planned peak of its workers must fit what it has available
// (plan/memory_fit.h, the comparison `doctor --config` reports), else an std::invalid_argument naming the peak, the
// memory available and the settings that would fit. Checked before any weight is read.
void check_memory(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute,
                  const std::vector<at::Device>& node_drafter);

// Drafter layer i <- target layer first + i, tensor by tensor (init_from_target_layer).
void copy_target_layers(const models::TargetModel& target, int64_t first, drafter::DrafterWeights& w);

}  // namespace dflash::train
