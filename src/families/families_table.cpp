#include "families_table.h"

#include "family.h"
#include "family_registry.h"

namespace dflash::families {

// Declared by each family's folder (NAME_family.h); declared again here so that this table needs no line per family.
#define DFLASH_FAMILY(family_fn) const drafter::Family& family_fn();
#define DFLASH_FAMILY_WITH_MODEL(family_fn, model_fn) DFLASH_FAMILY(family_fn)
#include "families_list.h"
#undef DFLASH_FAMILY
#undef DFLASH_FAMILY_WITH_MODEL

void register_builtin_families() {
#define DFLASH_FAMILY(family_fn) drafter::register_family(family_fn());
#define DFLASH_FAMILY_WITH_MODEL(family_fn, model_fn) DFLASH_FAMILY(family_fn)
#include "families_list.h"
#undef DFLASH_FAMILY
#undef DFLASH_FAMILY_WITH_MODEL
}

}  // namespace dflash::families
