// The registered drafter families (family.h), looked up by name and by config.json architecture. Filled once at
// start-up by families_table.h's register_builtin_families() (the `dflash` main and every test binary call it) and
// by tests that register a family of their own; read-only afterwards, so lookups need no lock. Torch-free.
#pragma once
#include <string>
#include <vector>

#include "drafter_family.h"
#include "family.h"

namespace dflash::drafter {

// Adds `f` (which outlives the process: a function-local static). Throws std::logic_error when its name or its
// architecture is registered already, by another object.
void register_family(const Family& f);
// In registration order.
const std::vector<const Family*>& registered_families();

const Family* find_family(const std::string& name);
const Family* find_family_of_architecture(const std::string& architecture);
// The registered names as a message lists them: "dflash, dspark or dflash2".
std::string registered_family_names();
// The family `name`; otherwise std::invalid_argument "<what> must be dflash, dspark or dflash2, got '<name>'".
const Family& family_named(const std::string& name, const std::string& what);
// The registered family of a DrafterFamily value (code still keyed on the enum); std::logic_error if none is.
const Family& family_of(DrafterFamily f);

}  // namespace dflash::drafter
