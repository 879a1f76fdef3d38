// The torch side of the built-in families (drafter/family_model.h): the model half of families_list.h's lines,
// registered by the `dflash` main and every test binary
// (tests/families/register_family_models.cpp) beside families_table.h's register_builtin_families(). Apart from
// that table because the torch-free builds of the families (the fuzz targets) cannot link the models.
#pragma once

namespace dflash::families {

// Registers the models of the built-in families once; calling it again adds nothing.
void register_builtin_family_models();

}  // namespace dflash::families
