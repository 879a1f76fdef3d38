#include "environment_switches.h"

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
  kernels::cuda::smem_limit_switch();  // throws on a malformed value
}

}  // namespace dflash::ops
