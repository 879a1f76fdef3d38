#include "families_table.h"

#include "dflash2_family.h"
#include "dflash_family.h"
#include "dspark_family.h"
#include "family_registry.h"

namespace dflash::families {

void register_builtin_families() {
  // In the order messages list them ("dflash, dspark or dflash2"); a new family is one line here.
  drafter::register_family(dflash_family());
  drafter::register_family(dspark_family());
  drafter::register_family(dflash2_family());
}

}  // namespace dflash::families
