// The instruction set the CPU kernels run with. Each kernel is compiled once per set (src/kernels/CMakeLists.txt)
// and DFLASH_ISA_CALL picks the copy. Chosen once: the environment variable DFLASH_CPU_ISA (base, avx2 or
// avx512) when set and runnable here, else the best set this CPU runs (named on stderr). Another value is refused:
// by every command at its start and by each kernel's value check (check_*), so the pip library refuses it too.
// Tests run every runnable set in turn through set_cpu_isa().
#pragma once
#include <string>
#include <vector>

namespace dflash::kernels {

enum class CpuIsa { Avx512, Avx2, Base };

CpuIsa cpu_isa();
// "" when DFLASH_CPU_ISA is unset, empty or the name of a set; else a one-line error naming the variable, its
// value and the names it takes.
std::string cpu_isa_switch_error();
// DFLASH_CPU_ISA as the environment set it when first asked ("" when unset): the one place that reads it.
const std::string& cpu_isa_forced();
const char* isa_name(CpuIsa isa);
// The sets this binary carries that this CPU can run, best first (Base always).
std::vector<CpuIsa> runnable_isas();
// Makes later kernel calls use `isa`; false (and nothing changes) when it is not runnable here. Call it
// between kernel calls, not during one.
bool set_cpu_isa(CpuIsa isa);

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
