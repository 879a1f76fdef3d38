#include "fault_inject_setting.h"

#include <cstdlib>
#include <iterator>

namespace dflash::ops {

std::string read_fault_inject(Fault& out) {
  struct Name {
    const char* name;
    Fault fault;
  };
  static constexpr Name kNames[] = {{"attention_wrong", Fault::AttentionWrong},
                                    {"attention_throw", Fault::AttentionThrow},
                                    {"cross_entropy_wrong", Fault::CrossEntropyWrong}};
  out = Fault::None;
  const char* v = std::getenv("DFLASH_FAULT_INJECT");
  if (!v || !*v) return "";
  std::string expected;
  const size_t count = std::size(kNames);
  for (size_t i = 0; i < count; ++i) {
    if (kNames[i].name == std::string(v)) {
      out = kNames[i].fault;
      return "";
    }
    expected += i == 0 ? "" : i + 1 == count ? " or " : ", ";
    expected += kNames[i].name;
  }
  return "DFLASH_FAULT_INJECT: expected " + expected + " (a test-only switch), got '" + v + "'";
}

}  // namespace dflash::ops
