#include "environment_switches.h"

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "anchor_attention_cuda_host.h"
#include "cpu_isa.h"

namespace dflash::ops {

bool is_fault_inject_value(const std::string& v) {
  return v == "attention_wrong" || v == "attention_throw" || v == "cross_entropy_wrong";
}

void check_environment_switches() {
  if (const char* f = std::getenv("DFLASH_FAULT_INJECT"); f && *f && !is_fault_inject_value(f))
    throw std::invalid_argument(std::string("DFLASH_FAULT_INJECT: expected ") + kFaultInjectSpellings +
                                " (a test-only switch), got '" + f + "'");
  if (const std::string bad = kernels::cpu_isa_switch_error(); !bad.empty()) throw std::invalid_argument(bad);
  if (const char* s = std::getenv("DFLASH_CUDA_SMEM_LIMIT")) {
    int64_t bytes = 0;
    if (!kernels::cuda::parse_smem_limit(s, bytes))
      throw std::invalid_argument(std::string("DFLASH_CUDA_SMEM_LIMIT must be a positive number of bytes (e.g. "
                                              "101376), got '") + s + "'");
  }
}

}  // namespace dflash::ops
