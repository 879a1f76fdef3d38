// Loads one Gated DeltaNet layer's tensors (transformers' Qwen3_5GatedDeltaNet, `linear_attn.*`) into the form
// deltanet_forward runs: the conv kernel as [conv_dim, K], -exp(A_log) and dt_bias in the state dtype. A generic
// piece of TargetModel::from_weights, used for every layer whose LayerKind mixer is Gated DeltaNet.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deltanet_layer.h"

namespace dflash::models {

// `load(suffix, shape)`: the layer's tensor under `suffix` ("linear_attn.A_log"), shape-checked, on its device in
// the model dtype `dtype` (throws naming the tensor when missing or misshapen).
DeltaNetWeights load_deltanet_weights(const LinearAttentionConfig& lc, int64_t hidden, at::ScalarType dtype,
                                      const std::function<at::Tensor(const std::string&, std::vector<int64_t>)>& load);

}  // namespace dflash::models
