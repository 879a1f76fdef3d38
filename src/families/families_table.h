// The drafter families this build knows: one line per family in families_list.h, registered into
// family_registry.h by the `dflash` main and every test binary (tests/families/register_families.cpp). Explicit
// rather than self-registering globals, which a static library drops when nothing references them.
#pragma once

namespace dflash::families {

// Registers every built-in family once; calling it again adds nothing.
void register_builtin_families();

}  // namespace dflash::families
