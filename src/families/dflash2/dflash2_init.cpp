#include "dflash2_init.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace dflash::drafter {

DrafterConfig dflash_backbone_config(DrafterConfig c) {
  c.family = FamilyRef{};  // the default family: the DFlash backbone
  return c;
}

DrafterWeights dflash2_from_dflash(const DrafterConfig& dflash2, const DrafterWeights& dflash, at::ScalarType dtype,
                                   uint64_t seed, double std) {
  if (std::string(dflash2.family.name()) != "dflash2")
    throw std::invalid_argument("dflash2_from_dflash: the target config must be family dflash2");
  if (!dflash.convs.empty())
    throw std::invalid_argument("dflash2_from_dflash: the starting weights are already a DFlash2 drafter's");
  DrafterWeights w = init_drafter_weights(dflash2, dtype, seed, std);
  const auto from = dflash.named();
  auto to = w.named();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < from.size(); ++i) {  // named(): the backbone first, in the same order
    if (i >= to.size() || to[i].first != from[i].first || !to[i].second.sizes().equals(from[i].second.sizes()))
      throw std::invalid_argument("dflash2_from_dflash: DFlash tensor '" + from[i].first +
                                  "' does not fit the DFlash2 config (another backbone?)");
    to[i].second.copy_(from[i].second);
  }
  return w;
}

DrafterWeights load_dflash_as_dflash2(const DrafterConfig& dflash2, const std::string& path, at::ScalarType dtype,
                                      uint64_t seed, double std) {
  return dflash2_from_dflash(dflash2, load_drafter_weights(dflash_backbone_config(dflash2), path, dtype), dtype, seed,
                             std);
}

}  // namespace dflash::drafter
