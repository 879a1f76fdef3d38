// A test-only drafter family: DFlash plus one setting of its own (`toy_gain`, a number > 0 in config.json's
// dflash_config, default 1). It lives in tests/ and is registered by one line (register_toy_family) to show what a
// fourth family needs: its folder and that line, no edit elsewhere (DrafterConfig included).
#pragma once
#include "family.h"

namespace dflash::families::testing {

const drafter::Family& toy_family();
// The one registration line; calling it again adds nothing.
void register_toy_family();
// The toy_gain a toy drafter config holds (std::logic_error when it holds no toy settings).
double toy_gain(const drafter::DrafterConfig& c);

}  // namespace dflash::families::testing
