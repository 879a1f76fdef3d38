// `dflash bench step --objective-naive 1`: a family's own objective timed against a naive version of it on the same
// inputs (FamilyModel::benchmark_objective, in the family's folder): what bench step hands the family. Torch side.
#pragma once
#include <cstdint>
#include <functional>

#include <c10/core/ScalarType.h>

#include "drafter_config.h"

namespace dflash::drafter {

struct ObjectiveBenchSetup {
  DrafterConfig drafter;  // its family, shape and settings
  int64_t anchors = 64, seq_len = 1024, loss_chunk_rows = 256, iters = 3;
  uint64_t seed = 0;
  bool cuda = false;  // on the current CUDA device; else the CPU
  c10::ScalarType dtype = c10::kFloat;
  std::function<int64_t()> reset;  // starts a memory measurement and returns the baseline
  std::function<int64_t()> peak;   // the peak since
};

}  // namespace dflash::drafter
