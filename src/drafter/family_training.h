// What the training loop asks of a drafter family (family.h's plug-in, torch side): the options of its objective
// from the run's settings, whether it needs the target's last hidden states, its block batches, and the metric
// terms its objective reports. The loop (src/train: step_producer, step_runner, trainer) calls these and never
// branches on a family. Reached through FamilyModel::training() (family_model.h's torch-side registry); the defaults here are DFlash's, so a family without
// training hooks of its own (DFlash, the test-only toy) trains as DFlash does.
//
// Metrics follow one reduction rule: a family's objective reports a vector of sums (metric_sums) that add over
// micro-batches, workers and processes (they ride the step's all-reduce), and the step's named metrics are computed
// from the totals once (step_metrics). So the logged terms mean the same however a step is split.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "block_batch.h"
#include "drafter_config.h"
#include "drafter_model.h"

namespace dflash::drafter {

// A family's metrics of one step, from the step's summed metric_sums.
struct FamilyStepMetrics {
  // metrics.jsonl keys and values, in the order written; NaN (nothing counted) is written as null.
  std::vector<std::pair<std::string, double>> named;
  // Appended to the progress line as is ("  l1 0.512  tau 1.734"); "" for nothing.
  std::string progress;
};

class FamilyTraining {
 public:
  virtual ~FamilyTraining() = default;

  // --- the objective's options ---
  // The decay gamma of a run whose gamma is 0 (unset); 0: by block size (loss_weighting.h's loss_gamma).
  virtual double unset_gamma() const { return 0; }
  // Sets the family's part of `o` (the generic part is set already) from the run's settings, which are train's keys
  // as train_config.json writes them (TrainConfig's to_json), and from the drafter `d`.
  virtual void add_loss_options(const nlohmann::json& /*settings*/, const DrafterConfig& /*d*/,
                                DrafterLossOptions& /*o*/) const {}
  // Turns the family's own fused loss kernels off in `o` (the run's loss-kernel self-check failed).
  virtual void use_generic_loss_kernels(DrafterLossOptions& /*o*/) const {}
  // Added once to the step's denominator, sum w + eps (DrafterLossResult::loss_eps, once per step, not per
  // micro-batch, so a step means the same however it is split).
  virtual double step_denominator_eps(const DrafterLossOptions& /*o*/) const { return 0; }
  // Train's settings that scale the family's loss terms (named in a diverged run's advice), in the order said.
  virtual std::vector<std::string> loss_setting_keys() const { return {}; }

  // --- the data (whether it needs the target's last hidden states: FamilyCost::needs_last_hidden) ---
  // The blocks of a micro-batch (block_batch.h's DFlash blocks by default), with loss weights decayed by `gamma`.
  virtual BlockBatch build_blocks(const DrafterConfig& d, const at::Tensor& input_ids, const at::Tensor& loss_mask,
                                  const AnchorSample& anchors, double gamma) const;

  // --- the metrics ---
  // Length of the family's metric sums; 0: none. The same in every process (the same collectives run).
  virtual int64_t metric_sums_size(const DrafterConfig& /*d*/) const { return 0; }
  // One micro-batch's sums ([metric_sums_size] float64 on the CPU), from its drafter_loss result; undefined: none.
  virtual at::Tensor metric_sums(const DrafterConfig& /*d*/, const DrafterLossResult& /*r*/) const { return {}; }
  // The step's metrics from the sums added over the whole step (all micro-batches, workers and processes).
  virtual FamilyStepMetrics step_metrics(const DrafterConfig& /*d*/, const at::Tensor& /*sums*/) const { return {}; }

  // --- the objective's options that the drafter fixes ---
  // Sets the part of `o` that follows from the drafter `d` alone (DFlash2's selector top-K), for callers without a
  // run's settings (bench step, drafter selftest); add_loss_options sets it as well.
  virtual void add_drafter_loss_options(const DrafterConfig& /*d*/, DrafterLossOptions& /*o*/) const {}
};

class Family;

// The training hooks of family `f`: its FamilyModel::training(), else the defaults above (DFlash's).
const FamilyTraining& family_training(const Family& f);
// Those of `d`'s family, which must be registered (family_registry.h).
const FamilyTraining& family_training(const DrafterConfig& d);
const FamilyTraining& family_training(FamilyRef f);

// A run setting the family reads by train's key: std::logic_error naming the key when `settings` lacks it or holds
// another type (a renamed setting, not a user's error: TrainConfig validated the values).
double run_setting_number(const nlohmann::json& settings, const std::string& key);
int64_t run_setting_int(const nlohmann::json& settings, const std::string& key);
bool run_setting_bool(const nlohmann::json& settings, const std::string& key);
std::string run_setting_text(const nlohmann::json& settings, const std::string& key);

}  // namespace dflash::drafter
