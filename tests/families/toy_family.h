// A test-only drafter family: DFlash plus one setting of its own (`toy_gain`, a positive integer at config.json's
// top level). It lives in tests/ and is registered by one line (register_toy_family) to show what a fourth
// family needs: its folder and that line, no edit elsewhere.
#pragma once
#include "family.h"

namespace dflash::families::testing {

const drafter::Family& toy_family();
// The one registration line; calling it again adds nothing.
void register_toy_family();

}  // namespace dflash::families::testing
