#include "gemm_rate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace dflash::ops {

GemmRate measure_gemm_rate(at::Device device) {
  const bool cuda = device.is_cuda();
  const auto opt = at::TensorOptions().dtype(cuda ? at::kBFloat16 : at::kFloat).device(device);
  const int64_t n = cuda ? 8192 : 2048;
  const auto sync = [&] {
    if (!device.is_cpu()) c10::impl::VirtualGuardImpl(device.type()).synchronizeDevice(device.index());
  };
  const at::Tensor a = at::randn({n, n}, opt), b = at::randn({n, n}, opt);
  at::mm(a, b);
  sync();
  std::vector<double> seconds;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm(a, b);
    sync();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {2.0 * double(n) * double(n) * double(n) / seconds[seconds.size() / 2] / 1e9,
          std::string(cuda ? "bf16 " : "fp32 ") + std::to_string(n) + "^3"};
}

}  // namespace dflash::ops
