// A target of a given architecture with random weights, for timing an architecture without its checkpoint
// (`dflash bench flops --target-config`): every tensor TargetModel::from_weights reads, under its Hugging Face
// name and shape; matrices N(0, 1 / fan_in), norms at their neutral scale (1, or 0 where stored zero-centred).
#pragma once
#include <cstdint>

#include "target_config.h"
#include "target_model.h"

namespace dflash::models {

TargetModel random_target(const TargetConfig& c, const TargetLoadOptions& options, uint64_t seed);

}  // namespace dflash::models
