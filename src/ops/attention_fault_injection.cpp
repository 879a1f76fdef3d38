#include "attention_fault_injection.h"

#include <cstdlib>
#include <string>

#include <c10/util/Exception.h>

namespace dflash::ops {
namespace {

struct FaultSetting {
  AttentionFault fault = AttentionFault::None;
  std::string bad;  // an unknown value, reported at every call
};

FaultSetting read_setting() {
  FaultSetting s;
  const char* v = std::getenv("DFLASH_FAULT_INJECT");
  const std::string value = v ? v : "";
  if (value == "attention_wrong") s.fault = AttentionFault::Wrong;
  else if (value == "attention_throw") s.fault = AttentionFault::Throw;
  else if (!value.empty()) s.bad = value;
  return s;
}

const FaultSetting& setting() {
  static const FaultSetting s = read_setting();
  return s;
}

}  // namespace

AttentionFault attention_fault() { return setting().fault; }

void inject_attention_fault(std::initializer_list<at::Tensor> results) {
  const FaultSetting& s = setting();
  if (s.fault == AttentionFault::None && s.bad.empty()) return;
  TORCH_CHECK(s.bad.empty(), "DFLASH_FAULT_INJECT: expected attention_wrong or attention_throw (a test-only switch), got '",
              s.bad, "'");
  TORCH_CHECK(s.fault != AttentionFault::Throw,
              "anchor_block_attention: injected failure (DFLASH_FAULT_INJECT=attention_throw, test only)");
  for (const at::Tensor& t : results)
    if (t.defined()) t.mul_(1.125);
}

}  // namespace dflash::ops
