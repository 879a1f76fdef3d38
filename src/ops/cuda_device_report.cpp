#include "cuda_device_report.h"

#include <fstream>
#include <stdexcept>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#ifdef DFLASH_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "anchor_attention_cuda.cuh"
#endif

namespace dflash::ops {
namespace {

// 12080 -> "12.8"; cuDNN's 91002 -> "9.10.2".
std::string cuda_version_text(long v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
std::string cudnn_version_text(long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// "580.65.06" from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ...").
std::string kernel_module_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "";
  const auto at = line.find("Kernel Module");
  if (at == std::string::npos) return "";
  const auto start = line.find_first_not_of(' ', at + 13);
  if (start == std::string::npos) return "";
  return line.substr(start, line.find(' ', start) - start);
}

}  // namespace

bool cuda_kernels_built() {
#ifdef DFLASH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

CudaVersions cuda_versions() {
  CudaVersions v;
  const auto& hooks = at::detail::getCUDAHooks();
  try {
    if (hooks.hasCUDART()) v.runtime = cuda_version_text(hooks.versionCUDART());
  } catch (const std::exception&) {
  }
  try {
    if (hooks.hasCuDNN()) v.cudnn = cudnn_version_text(hooks.versionCuDNN());
  } catch (const std::exception&) {
  }
#ifdef DFLASH_WITH_CUDA
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess && runtime > 0) v.runtime = cuda_version_text(runtime);
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    const std::string module = kernel_module_version();
    v.driver = (module.empty() ? "" : module + ", ") + "CUDA " + cuda_version_text(driver);
  }
#else
  if (const std::string module = kernel_module_version(); !module.empty()) v.driver = module;
#endif
  return v;
}

int cuda_device_count() { return at::hasCUDA() ? int(at::getNumGPUs()) : 0; }

CudaDeviceReport cuda_device_report(int index, const std::vector<int>& head_dims) {
#ifdef DFLASH_WITH_CUDA
  const auto ok = [&](cudaError_t err, const char* what) {
    if (err != cudaSuccess)
      throw std::runtime_error("cuda:" + std::to_string(index) + ": " + what + " failed: " + cudaGetErrorString(err));
  };
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  CudaDeviceReport r;
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  r.name = prop.name;
  r.major = prop.major, r.minor = prop.minor, r.multiprocessors = prop.multiProcessorCount;
  size_t free = 0, total = 0;
  ok(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  r.memory_free = int64_t(free), r.memory_total = int64_t(total);
  // Code this device runs: the smallest kernel's attributes load its image (or say there is none).
  int64_t bytes = 0;
  const cudaError_t image = kernels::cuda::anchor_attention_cuda_static_smem(
      kernels::cuda::tile_configs().front(), kernels::ScalarType::BFloat16, &bytes);
  r.kernel_image = image == cudaSuccess;
  if (!r.kernel_image) {
    (void)cudaGetLastError();  // the failed query leaves nothing for later launches to report
    r.kernel_image_error = cudaGetErrorString(image);
  }
  const CudaAttentionDevice a = cuda_attention_device(index, head_dims);
  r.smem_optin = a.smem_optin, r.smem_limit = a.smem_limit, r.tiles = a.tiles;
  return r;
#else
  (void)head_dims;
  throw std::runtime_error("cuda:" + std::to_string(index) +
                           ": this build has no CUDA kernels (configured with DFLASH_CUDA=OFF or without nvcc)");
#endif
}

}  // namespace dflash::ops
