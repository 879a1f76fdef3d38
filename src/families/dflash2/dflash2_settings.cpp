#include "dflash2_settings.h"

#include <stdexcept>

namespace dflash::drafter {

void DFlash2Settings::validate(const std::string& where, const std::string& prefix, int64_t hidden_size,
                               int64_t vocab_size) const {
  auto fail = [&](const char* field, const std::string& expected, int64_t got) {
    throw std::invalid_argument(where + ": field '" + prefix + field + "': expected " + expected + ", got " +
                                std::to_string(got));
  };
  // Bounds keep the [2, K, d] kernels, the [V, r] codebooks and the K x K lattice allocatable.
  if (conv_kernel_size < 1 || conv_kernel_size > 64) fail("conv_kernel_size", "an integer in [1, 64]", conv_kernel_size);
  if (conv_group_size < 1 || conv_group_size > 65536) fail("conv_group_size", "an integer in [1, 65536]", conv_group_size);
  if (hidden_size > 0 && hidden_size % conv_group_size != 0)
    fail("conv_group_size", "a divisor of hidden_size (" + std::to_string(hidden_size) + ")", conv_group_size);
  if (selector_rank < 1 || selector_rank > 65536) fail("selector_rank", "an integer in [1, 65536]", selector_rank);
  if (selector_top_k < 1 || selector_top_k > 1024) fail("selector_top_k", "an integer in [1, 1024]", selector_top_k);
  if (vocab_size > 0 && selector_top_k > vocab_size)
    fail("selector_top_k", "at most vocab_size (" + std::to_string(vocab_size) + ")", selector_top_k);
}

}  // namespace dflash::drafter
