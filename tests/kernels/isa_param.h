// Kernel tests run once per instruction-set build the binary carries (base, AVX2, AVX-512), not only the one
// this CPU would pick: parametrize with kEveryIsa and start the test with DFLASH_USE_ISA(isa). A set the CPU
// cannot run is skipped, saying so.
#pragma once
#include <gtest/gtest.h>

#include "cpu_isa.h"

namespace dflash::kernels::testing {

inline const auto kEveryIsa = ::testing::Values(CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Base);

inline std::string isa_label(const ::testing::TestParamInfo<CpuIsa>& info) { return isa_name(info.param); }

}  // namespace dflash::kernels::testing

#define DFLASH_USE_ISA(isa)                                                                               \
  if (!dflash::kernels::set_cpu_isa(isa))                                                                 \
  GTEST_SKIP() << dflash::kernels::isa_name(isa) << " is not runnable on this CPU"
