// Linked into every test binary and test tool of the layers that use the family registry (the top-level
// CMakeLists.txt adds it; tests/fuzz/targets too): the built-in families registered before main, as src/cli/main.cpp
// registers them. An object file rather than a static library member, which the linker would drop.
#include "families_table.h"

namespace {

const bool registered = (dflash::families::register_builtin_families(), true);

}  // namespace
