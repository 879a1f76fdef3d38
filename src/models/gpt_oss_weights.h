// Loads one gpt-oss layer's router and experts in the layouts users have: the fused tensors transformers writes
// (`mlp.experts.gate_up_proj` [E, H, 2 I] with gate and up in alternating columns, `down_proj` [E, I, H], their
// biases, `mlp.router.weight` / `.bias`), or the published checkpoints' MXFP4 expert matrices (`gate_up_proj_blocks`
// + `_scales` [E, 2 I, H / 32, 16] / [E, 2 I, H / 32], `down_proj_blocks` + `_scales`), dequantised here. Either
// way they become moe_block.h's layout: gate_up [E, 2 I, H] (gate rows, then up rows), down [E, H, I].
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

#include "moe_block.h"
#include "target_config.h"

namespace dflash::models {

struct GptOssLayerSource {
  std::function<at::Tensor(const std::string& suffix)> get;   // the layer's tensor as stored ("mlp.router.weight")
  std::function<bool(const std::string& suffix)> has;
  std::function<std::string(const std::string& suffix)> name;  // its full checkpoint name, for errors
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
};

// Throws naming the tensor when one is missing, misshapen or of a dtype the layout does not store.
MoeWeights load_gpt_oss_moe(const TargetConfig& c, const GptOssLayerSource& src);

}  // namespace dflash::models
