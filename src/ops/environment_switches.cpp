#include "environment_switches.h"

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "anchor_attention_cuda_host.h"
#include "cpu_isa.h"
#include "fault_inject_setting.h"

namespace dflash::ops {

void check_environment_switches() {
  Fault fault;
  if (const std::string bad = read_fault_inject(fault); !bad.empty()) throw std::invalid_argument(bad);
  if (const std::string bad = kernels::cpu_isa_switch_error(); !bad.empty()) throw std::invalid_argument(bad);
  if (const char* s = std::getenv("DFLASH_CUDA_SMEM_LIMIT")) {
    int64_t bytes = 0;
    if (!kernels::cuda::parse_smem_limit(s, bytes))
      throw std::invalid_argument(std::string("DFLASH_CUDA_SMEM_LIMIT must be a positive number of bytes (e.g. "
                                              "101376), got '") + s + "'");
  }
}

}  // namespace dflash::ops
