#include "target_limits.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace dflash::models {
namespace {

void at_most(const std::string& what, const char* field, int64_t v, int64_t max, const char* why) {
  if (v > max)
    throw std::runtime_error("target config " + what + ": field '" + field + "' is " + std::to_string(v) +
                             ", above the limit " + std::to_string(max) + " (" + why + ")");
}

}  // namespace

void check_target_layer_count(int64_t layers, const std::string& what) {
  at_most(what, "num_hidden_layers", layers, kMaxTargetLayers, "released models have a few hundred");
}

void check_target_limits(const TargetConfig& c, const std::string& what) {
  check_target_layer_count(c.num_hidden_layers, what);
  at_most(what, "hidden_size", c.hidden_size, kMaxTargetHidden, "2^20");
  at_most(what, "intermediate_size", c.intermediate_size, kMaxTargetIntermediate, "2^24");
  at_most(what, "vocab_size", c.vocab_size, kMaxTargetVocab, "2^24");
  at_most(what, "num_attention_heads", c.num_attention_heads, kMaxTargetHeads, "2^16");
  at_most(what, "num_key_value_heads", c.num_key_value_heads, kMaxTargetHeads, "2^16");
  at_most(what, "head_dim", c.head_dim, kMaxTargetHeadDim, "2^16");
  at_most(what, "num_experts", c.moe.num_experts, kMaxTargetExperts, "2^16");
  at_most(what, "moe_intermediate_size", c.moe.expert_intermediate, kMaxTargetIntermediate, "2^24");
  at_most(what, "shared_expert_intermediate_size", c.moe.shared_intermediate, kMaxTargetIntermediate, "2^24");
  if (c.info().hybrid) {
    at_most(what, "linear_num_key_heads", c.linear.num_key_heads, kMaxTargetHeads, "2^16");
    at_most(what, "linear_num_value_heads", c.linear.num_value_heads, kMaxTargetHeads, "2^16");
    at_most(what, "linear_key_head_dim", c.linear.key_head_dim, kMaxTargetHeadDim, "2^16");
    at_most(what, "linear_value_head_dim", c.linear.value_head_dim, kMaxTargetHeadDim, "2^16");
    at_most(what, "linear_conv_kernel_dim", c.linear.conv_kernel, kMaxTargetConvKernel, "2^16");
  }
  // Each field may be within its limit and the model still absurd (2^20 hidden x 2^24 vocab): bound the weights.
  // An upper bound per layer (the larger of an attention and a DeltaNet layer, every expert held), in double.
  const double H = double(c.hidden_size), D = double(c.head_dim);
  const double attention = H * D * (2 * double(c.num_attention_heads) + 2 * double(c.num_key_value_heads)) +
                           H * D * double(c.num_attention_heads);  // q (and its gate), k, v, o
  const LinearAttentionConfig& l = c.linear;
  const double deltanet = c.info().hybrid ? H * (2.0 * double(l.num_key_heads) * double(l.key_head_dim) +
                                          2.0 * double(l.num_value_heads) * double(l.value_head_dim) +
                                          2.0 * double(l.num_value_heads)) +
                                         double(l.num_value_heads) * double(l.value_head_dim) * (H + double(l.conv_kernel))
                                    : 0.0;
  const double mlp = 3 * H * double(c.intermediate_size) +
                     double(c.moe.num_experts) * (H + 3 * H * double(c.moe.expert_intermediate)) +
                     3 * H * double(c.moe.shared_intermediate);
  const double params = double(c.num_hidden_layers) * (std::max(attention, deltanet) + mlp) + 2 * double(c.vocab_size) * H;
  if (params > kMaxTargetParams) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", params);
    throw std::runtime_error("target config " + what + ": its sizes describe up to " + buf +
                             " parameters, above the limit 1e15 (2 PB of bf16 weights); check num_hidden_layers, "
                             "hidden_size, intermediate_size, vocab_size and the expert counts");
  }
}

}  // namespace dflash::models
