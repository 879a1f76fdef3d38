// The mixture-of-experts part of a llama.cpp GGUF target (`general.architecture` qwen3moe): the routing settings
// from the `qwen3moe.expert_*` metadata, and each layer's experts from the stacked 3-D tensors the converter
// writes (`blk.N.ffn_{gate,up,down}_exps.weight`, [E, I, H] / [E, H, I] row-major), dequantised expert by expert
// straight into the fused layout the MoE block runs (gate_up [E, 2 I, H], down [E, H, I]).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "gguf.h"
#include "target_config.h"

namespace dflash::models {

// Reads `<arch>.expert_count`, `expert_used_count`, `expert_feed_forward_length` and the optional routing keys
// (`expert_weights_norm`, default true as llama.cpp's qwen3moe graph; `expert_gating_func` softmax only;
// `expert_weights_scale` 1 or absent; no shared experts, no leading dense blocks) into c.moe: every layer routed.
// Throws naming the key and the value otherwise.
void read_gguf_moe_config(const io::GGUFFile& f, const std::string& arch, TargetConfig& c);

// Checks that every layer has its router and three expert tensors with the shapes the config gives; throws
// naming the first missing or misshapen tensor, its shape and the expected one.
void check_gguf_moe_tensors(const io::GGUFFile& f, const TargetConfig& c);

// Layer `layer`'s experts as float32: gate and up rows per expert (the MoE block's gate_up), or down.
at::Tensor gguf_expert_gate_up(const io::GGUFFile& f, int64_t layer);
at::Tensor gguf_expert_down(const io::GGUFFile& f, int64_t layer);

// The tensor's values as a float32 tensor of its row-major shape; throws for integer types (weights are float
// or quantised) and for quantisations the reader cannot dequantise.
at::Tensor gguf_float_tensor(const io::GGUFFile& f, const io::GGUFTensorInfo& t);

}  // namespace dflash::models
