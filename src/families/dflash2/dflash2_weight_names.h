// DFlash2's extra tensors under z-lab's checkpoint names (docs/DFLASH2.md; the names themselves:
// drafter/conv_selector_weight_names.h, which DrafterWeights::named() lists), next to the DFlash names of
// drafter_weights.h:
//   layers.{i}.attention_conv.base_kernel               [2, K, d]
//   layers.{i}.attention_conv.kernel_projection.weight  [2*K*d/G, d]
//   layers.{i}.mlp_conv.{base_kernel, kernel_projection.weight}
//   candidate_selector.hidden_projection.weight         [r, d]
//   candidate_selector.predecessor_codebook             [V, r]   bare names: no ".weight" (z-lab maps them onto
//   candidate_selector.successor_codebook               [V, r]   nn.Embedding with key_mapping when loading)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conv_selector_weight_names.h"

namespace dflash::drafter {

struct DFlash2Dims {
  int64_t num_layers = 0, hidden = 0, vocab = 0;
  int64_t conv_kernel_size = 2, conv_group_size = 16;  // K_conv, G
  int64_t selector_rank = 256;                         // r
};

// (name, shape) of every DFlash2 tensor beyond DFlash's: layer by layer (attention_conv, then mlp_conv; base
// kernel, then projection), then the selector. Throws std::invalid_argument when G does not divide d or a
// dimension is < 1.
std::vector<std::pair<std::string, std::vector<int64_t>>> dflash2_extra_weight_shapes(const DFlash2Dims& d);

}  // namespace dflash::drafter
