#include "conv_selector_weight_names.h"

namespace dflash::drafter {

const char* const kSelectorHiddenProjection = "candidate_selector.hidden_projection.weight";
const char* const kSelectorPredecessorCodebook = "candidate_selector.predecessor_codebook";
const char* const kSelectorSuccessorCodebook = "candidate_selector.successor_codebook";

namespace {
std::string conv_prefix(int64_t layer, ConvSite site) {
  return "layers." + std::to_string(layer) + (site == ConvSite::Attention ? ".attention_conv." : ".mlp_conv.");
}
}  // namespace

std::string conv_base_kernel_name(int64_t layer, ConvSite site) { return conv_prefix(layer, site) + "base_kernel"; }

std::string conv_kernel_projection_name(int64_t layer, ConvSite site) {
  return conv_prefix(layer, site) + "kernel_projection.weight";
}

}  // namespace dflash::drafter
