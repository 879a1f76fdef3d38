// DFLASH_FAULT_INJECT's values in one place: the op library reads the switch at its first fused call
// (fault_injection.cpp) and every command checks it at start (environment_switches.cpp, in the command library,
// which the pip package does not carry); both take the names and the error from here. Torch-free.
#pragma once
#include <string>

namespace dflash::ops {

enum class Fault { None, AttentionWrong, AttentionThrow, CrossEntropyWrong };

// The fault DFLASH_FAULT_INJECT names (None when unset or empty) into `out`; returns "" or, for another value, a
// one-line error naming the variable, the value and the values it takes.
std::string read_fault_inject(Fault& out);

}  // namespace dflash::ops
