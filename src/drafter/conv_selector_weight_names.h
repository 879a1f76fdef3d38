// The checkpoint names of DrafterWeights' block convolutions and candidate selector (z-lab's names,
// docs/DFLASH2.md "Weight names"), which DrafterWeights::named() lists; which of them a config has, and their
// shapes, are its family's (DFlash2: families/dflash2/dflash2_weight_names.h).
//   layers.{i}.attention_conv.base_kernel, layers.{i}.attention_conv.kernel_projection.weight
//   layers.{i}.mlp_conv.{base_kernel, kernel_projection.weight}
//   candidate_selector.hidden_projection.weight
//   candidate_selector.predecessor_codebook     bare names: no ".weight" (z-lab maps them onto
//   candidate_selector.successor_codebook       nn.Embedding with key_mapping when loading)
#pragma once
#include <cstdint>
#include <string>

namespace dflash::drafter {

enum class ConvSite { Attention, Mlp };
std::string conv_base_kernel_name(int64_t layer, ConvSite site);
std::string conv_kernel_projection_name(int64_t layer, ConvSite site);

extern const char* const kSelectorHiddenProjection;     // candidate_selector.hidden_projection.weight
extern const char* const kSelectorPredecessorCodebook;  // candidate_selector.predecessor_codebook
extern const char* const kSelectorSuccessorCodebook;    // candidate_selector.successor_codebook

}  // namespace dflash::drafter
