// What a target config may claim. Every size and count is bounded by what dflash's arithmetic and any machine's
// memory allow, so a config of 2147483647 layers is refused in one line instead of being planned for minutes or
// allocated (docs/ERRORS.md "Limits of a target config"). Framework-free.
#pragma once
#include <cstdint>
#include <string>

#include "target_config.h"

namespace dflash::models {

constexpr int64_t kMaxTargetLayers = 65536;        // num_hidden_layers: per-layer state is kept for each
constexpr int64_t kMaxTargetHeads = 65536;         // attention / key-value / DeltaNet heads
constexpr int64_t kMaxTargetHeadDim = 65536;       // head_dim, linear_key_head_dim, linear_value_head_dim
constexpr int64_t kMaxTargetHidden = 1048576;      // hidden_size (2^20)
constexpr int64_t kMaxTargetIntermediate = 16777216;  // intermediate sizes, dense, expert and shared (2^24)
constexpr int64_t kMaxTargetVocab = 16777216;      // vocab_size (2^24)
constexpr int64_t kMaxTargetExperts = 65536;       // num_experts
constexpr int64_t kMaxTargetConvKernel = 65536;    // linear_conv_kernel_dim
constexpr double kMaxTargetParams = 1e15;          // 2 PB of bf16 weights: more than any node holds

// num_hidden_layers alone: checked before anything is sized by it (a hybrid's layer_types list).
void check_target_layer_count(int64_t layers, const std::string& what);
// Every bounded field, then the parameter count the config implies (an upper bound, in double: no overflow).
// Throws std::runtime_error "target config <what>: field '<f>' is <v>, above the limit <max> (<why>)".
void check_target_limits(const TargetConfig& c, const std::string& what);

}  // namespace dflash::models
