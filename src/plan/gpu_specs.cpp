#include "gpu_specs.h"

#include <stdexcept>

namespace dflash::plan {

const std::vector<GpuSpec>& gpu_specs() {
  // Dense bf16 tensor rates as the vendor's data sheets give them (sparse figures halved where only those are
  // quoted): H100 SXM and H200 989 TFLOP/s, B200 2.25 PFLOP/s, RTX PRO 6000 Blackwell 503.8 TFLOP/s (FP32
  // accumulate; 1.0 PFLOP/s with sparsity). docs/TRAINING.md cites them.
  static const std::vector<GpuSpec> specs = {
      {"h100", 80e9, 989e12},
      {"h200", 141e9, 989e12},
      {"b200", 180e9, 2250e12},
      {"rtx-pro-6000", 96e9, 503.8e12},
  };
  return specs;
}

GpuSpec gpu_spec(const std::string& name) {
  std::string names;
  for (const auto& g : gpu_specs()) {
    if (g.name == name) return g;
    if (!names.empty()) names += ", ";
    names += g.name;
  }
  throw std::invalid_argument("plan: --gpu expects one of " + names + " (or --gpu-memory and --gpu-tflops), got '" +
                              name + "'");
}

}  // namespace dflash::plan
