// DFlash2's settings (docs/DFLASH2.md), parsed once into these types. Torch-free.
// - The model's (DFlash2Settings): z-lab's dflash_config keys conv_kernel_size, conv_group_size, selector_rank,
//   selector_top_k, with the sources' defaults (K_conv 2, G 16, r 256, K 16).
// - The objective's (SelectorCandidates, alpha's default): drafter/selector_candidates.h, which the selector's loss
//   below the families layer reads.
#pragma once
#include <cstdint>
#include <string>

#include "selector_candidates.h"  // the objective's settings, which the selector's loss reads from below

namespace dflash::drafter {

// The model's shape settings (config.json's dflash_config).
struct DFlash2Settings {
  int64_t conv_kernel_size = 2;  // K_conv: taps per conv
  int64_t conv_group_size = 16;  // G: channels sharing one dynamic coefficient (divides hidden_size)
  int64_t selector_rank = 256;   // r: codebooks [V, r], hidden_projection [r, d]
  int64_t selector_top_k = 16;   // K: candidates per drafted slot

  // Throws std::invalid_argument "<where>: field '<prefix><name>': expected ..., got ..." for a value out of range,
  // a group size that does not divide hidden_size, or a top-K larger than vocab_size.
  void validate(const std::string& where, const std::string& prefix, int64_t hidden_size, int64_t vocab_size) const;
  bool operator==(const DFlash2Settings& o) const {
    return conv_kernel_size == o.conv_kernel_size && conv_group_size == o.conv_group_size &&
           selector_rank == o.selector_rank && selector_top_k == o.selector_top_k;
  }
  bool operator!=(const DFlash2Settings& o) const { return !(*this == o); }
};

}  // namespace dflash::drafter
