// Phase 3 of a training run: the fp32 master weights (fp64 for fp64 compute) and the AdamW state, on the
// gradient device, fresh or from the resume checkpoint; and the checkpoint made of them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "optimizer.h"
#include "run_context.h"
#include "target_setup.h"

namespace dflash::train {

struct MasterState {
  NamedTensors named;              // master weights in DrafterWeights::named() order, on the gradient device
  std::vector<at::Tensor> params;  // the same tensors
  std::unique_ptr<AdamW> adam;

  // The checkpoint of the state after `step` optimizer steps (CPU copies).
  TrainState checkpoint(int64_t step, int64_t data_pos, nlohmann::json info) const;
  // False when any master weight holds NaN or Inf (a checkpoint of such weights is refused).
  bool finite() const;
};

MasterState build_master_state(const TrainConfig& cfg, const RunContext& run, const TargetSide& side);

}  // namespace dflash::train
