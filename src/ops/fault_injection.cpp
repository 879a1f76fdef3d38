#include "fault_injection.h"

#include <string>

#include <c10/util/Exception.h>

#include "fault_inject_setting.h"

namespace dflash::ops {
namespace {

struct FaultSetting {
  Fault fault = Fault::None;
  std::string bad;  // the error for an unknown value, reported at every fused call
};

FaultSetting read_setting() {
  FaultSetting s;
  s.bad = read_fault_inject(s.fault);
  return s;
}

const FaultSetting& setting() {
  static const FaultSetting s = read_setting();
  return s;
}

void check_known(const FaultSetting& s) {
  TORCH_CHECK(s.bad.empty(), s.bad);
}

void scale(std::initializer_list<at::Tensor> results) {
  for (const at::Tensor& t : results)
    if (t.defined()) t.mul_(1.125);
}

}  // namespace

void inject_attention_fault(std::initializer_list<at::Tensor> results) {
  const FaultSetting& s = setting();
  check_known(s);
  TORCH_CHECK(s.fault != Fault::AttentionThrow,
              "anchor_block_attention: injected failure (DFLASH_FAULT_INJECT=attention_throw, test only)");
  if (s.fault == Fault::AttentionWrong) scale(results);
}

void inject_cross_entropy_fault(std::initializer_list<at::Tensor> results) {
  const FaultSetting& s = setting();
  check_known(s);
  if (s.fault == Fault::CrossEntropyWrong) scale(results);
}

}  // namespace dflash::ops
