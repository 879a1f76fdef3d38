// What the config.json readers of every architecture share (arch/*_arch.cpp): field readers that throw naming the
// file and the field, the decoder fields all architectures have, the routed-expert fields, layer_types.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target_config.h"

namespace dflash::models::arch {

using nlohmann::json;

constexpr int64_t kMaxTargetInt = 2147483647;  // sizes and counts become int (layers, heads, token ids)

// Throws "target config <what>: <msg>".
[[noreturn]] void fail(const std::string& what, const std::string& msg);
// `name` must be in [1, kMaxTargetInt].
void check_positive(const std::string& what, const char* name, int64_t v);
bool absent(const json& j, const char* key);  // missing or null

int64_t get_int(const json& j, const std::string& key, const std::string& what, bool required, int64_t def);
double get_num(const json& j, const std::string& key, const std::string& what, double def);
bool get_bool(const json& j, const std::string& key, const std::string& what, bool def);
// 1e-09, not 0.000000; inf and nan by name (JSON has no spelling for them).
std::string shown_double(double v);
std::vector<int64_t> get_ids(const json& j, const std::string& key, const std::string& what);
RopeConfig parse_rope(const json& j, int64_t max_positions, const std::string& what);

// The layer types `arch` may list, as the errors show them ("\"linear_attention\", \"full_attention\"").
const char* supported_layer_types(TargetArch arch);
std::vector<LayerType> parse_layer_types(const json& t, const std::string& what, TargetArch arch);
// A dense architecture's layer_types, when given, may only say full_attention.
void check_full_attention_only(const json& j, const std::string& what);

// The decoder fields every supported architecture shares, read from `t`.
// `dense_mlp_required`: false for MoE families whose layers may all be routed (intermediate_size then optional).
void parse_decoder_fields(const json& t, const std::string& what, TargetConfig& c, bool dense_mlp_required = true);
// The routed-expert fields (Qwen3-MoE / Qwen3.5-MoE names; transformers 5 may write num_local_experts).
void parse_moe_fields(const json& t, const std::string& what, TargetConfig& c, bool shared_expert);

}  // namespace dflash::models::arch
