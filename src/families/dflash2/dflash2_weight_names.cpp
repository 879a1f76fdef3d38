#include "dflash2_weight_names.h"

#include <stdexcept>

namespace dflash::drafter {

std::vector<std::pair<std::string, std::vector<int64_t>>> dflash2_extra_weight_shapes(const DFlash2Dims& d) {
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"num_hidden_layers", d.num_layers},
                                {"hidden_size", d.hidden}, {"vocab_size", d.vocab},
                                {"conv_kernel_size", d.conv_kernel_size}, {"conv_group_size", d.conv_group_size},
                                {"selector_rank", d.selector_rank}})
    if (v < 1) throw std::invalid_argument(std::string("dflash2 weights: ") + name + " must be >= 1, got " + std::to_string(v));
  if (d.hidden % d.conv_group_size != 0)
    throw std::invalid_argument("dflash2 weights: conv_group_size " + std::to_string(d.conv_group_size) +
                                " must divide hidden_size " + std::to_string(d.hidden));
  const int64_t K = d.conv_kernel_size, rows = 2 * K * (d.hidden / d.conv_group_size);
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (int64_t i = 0; i < d.num_layers; ++i)
    for (ConvSite site : {ConvSite::Attention, ConvSite::Mlp}) {
      out.emplace_back(conv_base_kernel_name(i, site), std::vector<int64_t>{2, K, d.hidden});
      out.emplace_back(conv_kernel_projection_name(i, site), std::vector<int64_t>{rows, d.hidden});
    }
  out.emplace_back(kSelectorHiddenProjection, std::vector<int64_t>{d.selector_rank, d.hidden});
  out.emplace_back(kSelectorPredecessorCodebook, std::vector<int64_t>{d.vocab, d.selector_rank});
  out.emplace_back(kSelectorSuccessorCodebook, std::vector<int64_t>{d.vocab, d.selector_rank});
  return out;
}

}  // namespace dflash::drafter
