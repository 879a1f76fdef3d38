// Loads one layer's mixture-of-experts weights in either layout users have: the per-expert tensors of the
// published checkpoints (`mlp.experts.N.gate_proj.weight`, ...) or the fused tensors transformers keeps in memory
// (`mlp.experts.gate_up_proj` [E, 2 I, H], `mlp.experts.down_proj` [E, H, I]).
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "moe_block.h"
#include "target_config.h"

namespace dflash::models {

// `load(suffix, shape)`: the layer's tensor under `suffix` ("mlp.gate.weight"), shape-checked, on its device and
// dtype (throws naming the tensor when missing or misshapen); `has(suffix)`: whether the checkpoint holds it;
// `name(suffix)`: its full checkpoint name, for errors. A layer that holds its experts in both layouts is refused
// (two encodings of the same weights: one would be dropped without a word).
MoeWeights load_moe_weights(const TargetConfig& c,
                            const std::function<at::Tensor(const std::string&, std::vector<int64_t>)>& load,
                            const std::function<bool(const std::string&)>& has,
                            const std::function<std::string(const std::string&)>& name);

}  // namespace dflash::models
