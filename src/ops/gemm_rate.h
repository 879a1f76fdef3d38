// The machine's matrix-multiply rate as LibTorch delivers it (torch.mm): the yardstick `dflash bench attention`
// and `dflash doctor` print beside the attention's own speed. bf16 8192^3 on CUDA, fp32 2048^3 on the CPU (at the
// calling thread's intra-op threads); the median of 5 products after one warm-up.
#pragma once
#include <string>

#include <c10/core/Device.h>

namespace dflash::ops {

struct GemmRate {
  double gflops = 0;
  std::string shape;  // "bf16 8192^3", "fp32 2048^3"
};

GemmRate measure_gemm_rate(at::Device device);

}  // namespace dflash::ops
