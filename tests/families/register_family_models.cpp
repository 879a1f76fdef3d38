// Linked into every test binary and test tool beside register_families.cpp (not into the torch-free fuzz targets):
// the built-in families' models registered before main, as src/cli/main.cpp registers them.
#include "family_models_table.h"

namespace {

const bool registered = (dflash::families::register_builtin_family_models(), true);

}  // namespace
