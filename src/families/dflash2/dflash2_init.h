// A DFlash2 drafter that starts from a DFlash drafter (docs/DFLASH2.md): the DFlash backbone as it is,
// identity convs and the selector at its no-op start (init_drafter_weights), so the DFlash2 drafter computes what
// the DFlash one does, bit for bit, until it trains.
#pragma once
#include <cstdint>
#include <string>

#include "drafter_weights.h"

namespace dflash::drafter {

// `dflash2` is the DFlash2 config; `dflash` the backbone's weights for the same config as family dflash. The
// selector's Gaussian tensors are drawn with `seed` and `std`. Throws std::invalid_argument on a shape mismatch.
DrafterWeights dflash2_from_dflash(const DrafterConfig& dflash2, const DrafterWeights& dflash, at::ScalarType dtype,
                                   uint64_t seed, double std = 0.02);

// The same from a DFlash model.safetensors (errors name the file and the tensor).
DrafterWeights load_dflash_as_dflash2(const DrafterConfig& dflash2, const std::string& path, at::ScalarType dtype,
                                      uint64_t seed, double std = 0.02);

// `c` as family dflash: the backbone's config of a DFlash2 config.
DrafterConfig dflash_backbone_config(DrafterConfig c);

}  // namespace dflash::drafter
