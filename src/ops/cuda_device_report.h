// What `dflash doctor` shows of the CUDA side: the versions of the CUDA runtime, driver and cuDNN this process
// runs with, and for each GPU its name, compute capability, memory, shared memory per block, whether this build
// holds a kernel image it runs, and the tile configuration the CUDA attention chooses there for each kernel and
// head dim (the same choice, cache and DFLASH_CUDA_SMEM_LIMIT cap as the op: anchor_attention_cuda_op.cpp).
// Every build has these functions; a build without the CUDA kernels says so instead of querying.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash::ops {

// Whether this library holds the CUDA kernels (DFLASH_CUDA at configure time, nvcc found).
bool cuda_kernels_built();

struct CudaVersions {
  std::string runtime;  // the CUDA runtime loaded ("13.0"); "" when LibTorch has no CUDA
  std::string driver;   // the kernel module's version and the CUDA version its driver API supports
                        // ("580.65.06, CUDA 13.0"); "" when no driver is installed
  std::string cudnn;    // "9.10.2"; "" when LibTorch has no cuDNN
};
CudaVersions cuda_versions();

// GPUs LibTorch sees (0 without CUDA or without a GPU).
int cuda_device_count();

struct CudaTileChoice {
  std::string kernel;  // forward, backward, deterministic dQ (anchor_attention_cuda_host.h)
  int head_dim = 0;
  int keys = 0, stages = 0;  // keys per tile, K/V buffers
  int64_t smem_bytes = 0;    // dynamic + static shared memory per block
  std::string error;         // the op's message when nothing runs (no kernel image, nothing fits); then no config
};

struct CudaDeviceReport {
  std::string name;            // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;    // compute capability
  int multiprocessors = 0;
  int64_t memory_total = 0, memory_free = 0;
  int64_t smem_optin = 0;      // shared memory per block the device allows (opt-in)
  int64_t smem_limit = 0;      // what the attention chooses tiles for (smem_optin, capped by DFLASH_CUDA_SMEM_LIMIT)
  bool kernel_image = false;   // this build holds code the device runs
  std::string kernel_image_error;
  std::vector<CudaTileChoice> tiles;  // per head dim: forward, backward, deterministic dQ (bf16)
};

// Throws when this build has no CUDA kernels or the device cannot be queried.
CudaDeviceReport cuda_device_report(int index, const std::vector<int>& head_dims);

// The CUDA attention's own view of device `index` (defined beside the op, which owns the per-device state):
// the shared-memory figures and its tile choice per kernel and head dim. Only in builds with the CUDA kernels.
struct CudaAttentionDevice {
  int64_t smem_optin = 0, smem_limit = 0;
  std::vector<CudaTileChoice> tiles;
};
CudaAttentionDevice cuda_attention_device(int index, const std::vector<int>& head_dims);

}  // namespace dflash::ops
