// What the CUDA kernels of this build were compiled for, in cuobjdump's words: "sm_80 sm_90 sm_100 sm_120
// compute_120" (machine code per architecture, then the PTX that newer GPUs compile at load time); "" when the
// build has no CUDA kernels. Fixed at configure time (DFLASH_CUDA_ARCHS, cmake/dflash_cuda_archs.cmake);
// needs neither CUDA nor LibTorch, so every build can report it.
#pragma once
#include <string>

namespace dflash::kernels {

std::string cuda_compiled_archs();

}  // namespace dflash::kernels
