// The GPUs `plan --node` knows by name: memory and dense bf16 rate as the vendors' data sheets give them. One
// table; a GPU not in it is given by its figures (--gpu-memory, --gpu-tflops).
#pragma once
#include <string>
#include <vector>

namespace dflash::plan {

struct GpuSpec {
  std::string name;
  double memory_bytes = 0;  // as sold (80 GB = 80e9 bytes)
  double bf16_flops = 0;    // dense bf16 tensor-core peak, FLOP/s (no sparsity)
};

// h100 (80 GB, 989 TFLOP/s), h200 (141 GB, 989), b200 (180 GB, 2250), rtx-pro-6000 (96 GB, 503.8).
const std::vector<GpuSpec>& gpu_specs();
// Throws std::invalid_argument naming the known names.
GpuSpec gpu_spec(const std::string& name);

}  // namespace dflash::plan
