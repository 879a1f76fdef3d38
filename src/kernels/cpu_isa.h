// The instruction set the CPU kernels run with, detected once; each kernel is compiled once per set
// (src/kernels/CMakeLists.txt) and DFLASH_ISA_CALL picks the copy.
#pragma once

namespace dflash::kernels {

enum class CpuIsa { Avx512, Avx2, Base };

CpuIsa cpu_isa();

#if defined(DFLASH_HAVE_X86_ISAS)
#define DFLASH_ISA_CALL(fn, ...)                                 \
  switch (cpu_isa()) {                                           \
    case CpuIsa::Avx512: return cpu_avx512::fn(__VA_ARGS__);     \
    case CpuIsa::Avx2: return cpu_avx2::fn(__VA_ARGS__);         \
    case CpuIsa::Base: return cpu_base::fn(__VA_ARGS__);         \
  }                                                              \
  return cpu_base::fn(__VA_ARGS__)
#else
#define DFLASH_ISA_CALL(fn, ...) return cpu_base::fn(__VA_ARGS__)
#endif

}  // namespace dflash::kernels
