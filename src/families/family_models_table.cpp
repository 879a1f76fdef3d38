#include "family_models_table.h"

#include "family.h"
#include "family_model.h"

namespace dflash::families {

// Declared by each family's folder (NAME_family.h, NAME_model_hooks.h); declared again here so that this table
// needs no line per family. A family without a model of its own is DFlash's plain drafter (FamilyModel's defaults).
#define DFLASH_FAMILY(family_fn)
#define DFLASH_FAMILY_WITH_MODEL(family_fn, model_fn) \
  const drafter::Family& family_fn();                 \
  const drafter::FamilyModel& model_fn();
#include "families_list.h"
#undef DFLASH_FAMILY
#undef DFLASH_FAMILY_WITH_MODEL

void register_builtin_family_models() {
#define DFLASH_FAMILY(family_fn)
#define DFLASH_FAMILY_WITH_MODEL(family_fn, model_fn) drafter::register_family_model(family_fn(), model_fn());
#include "families_list.h"
#undef DFLASH_FAMILY
#undef DFLASH_FAMILY_WITH_MODEL
}

}  // namespace dflash::families
