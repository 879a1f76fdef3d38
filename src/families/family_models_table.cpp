#include "family_models_table.h"

#include "dflash2_family.h"
#include "dflash2_model_hooks.h"
#include "dspark_family.h"
#include "dspark_model_hooks.h"
#include "family_model.h"

namespace dflash::families {

void register_builtin_family_models() {
  // DFlash has none: it is the plain drafter (FamilyModel's defaults).
  drafter::register_family_model(dspark_family(), dspark_model());
  drafter::register_family_model(dflash2_family(), dflash2_model());
}

}  // namespace dflash::families
