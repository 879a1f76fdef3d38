#include "cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dflash::kernels {
namespace {

bool runnable(CpuIsa isa) {
  if (isa == CpuIsa::Base) return true;
#if defined(__x86_64__) && defined(DFLASH_HAVE_X86_ISAS)
  __builtin_cpu_init();
  if (isa == CpuIsa::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

CpuIsa choose() {
  const auto isas = runnable_isas();
  if (const std::string& w = cpu_isa_forced(); !w.empty()) {
    const char* want = w.c_str();
    for (CpuIsa i : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Base})
      if (want == std::string(isa_name(i))) {
        if (std::find(isas.begin(), isas.end(), i) != isas.end()) return i;
        std::fprintf(stderr, "dflash: DFLASH_CPU_ISA=%s is not runnable on this CPU or build; using %s\n", want,
                     isa_name(isas.front()));
        return isas.front();
      }
    // Another value is refused before any kernel runs (cpu_isa_switch_error()); a caller that skipped the
    // check gets the best set.
  }
  return isas.front();
}

std::atomic<CpuIsa>& chosen() {
  static std::atomic<CpuIsa> isa{choose()};
  return isa;
}

}  // namespace

const std::string& cpu_isa_forced() {
  static const std::string forced = [] {
    const char* v = std::getenv("DFLASH_CPU_ISA");  // the one read of the switch
    return std::string(v ? v : "");
  }();
  return forced;
}

std::string cpu_isa_switch_error() {
  const std::string& want = cpu_isa_forced();
  if (want.empty()) return "";
  for (CpuIsa i : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Base})
    if (want == isa_name(i)) return "";
  return "DFLASH_CPU_ISA: expected base, avx2 or avx512, got '" + want + "'";
}

CpuIsa cpu_isa() { return chosen().load(std::memory_order_relaxed); }

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Base: return "base";
  }
  return "base";
}

std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa i : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Base})
    if (runnable(i)) out.push_back(i);
  return out;
}

bool set_cpu_isa(CpuIsa isa) {
  if (!runnable(isa)) return false;
  chosen().store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace dflash::kernels
