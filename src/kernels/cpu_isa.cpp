#include "cpu_isa.h"

namespace dflash::kernels {
namespace {

CpuIsa detect() {
#if defined(__x86_64__) && defined(DFLASH_HAVE_X86_ISAS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return CpuIsa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::Avx2;
#endif
  return CpuIsa::Base;
}

}  // namespace

CpuIsa cpu_isa() {
  static const CpuIsa chosen = detect();  // set once, read-only afterwards
  return chosen;
}

}  // namespace dflash::kernels
