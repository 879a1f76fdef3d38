// The built-in drafter families, one line each: the only line outside its folder that a family needs. Both
// registration tables are generated from it: families_table.cpp registers each family (family.h), and
// family_models_table.cpp each family's torch side (family_model.h). The fuzz targets link families_table.cpp
// without torch, so the model half of a line is a name that only the torch table refers to.
//
//   DFLASH_FAMILY(family_fn)                      a family whose model is DFlash's (FamilyModel's defaults)
//   DFLASH_FAMILY_WITH_MODEL(family_fn, model_fn) a family with a model of its own
//
// family_fn returns `const drafter::Family&`, model_fn `const drafter::FamilyModel&`, both declared in
// dflash::families by the family's folder. The order is the order messages list them ("dflash, dspark or dflash2").
// No include guard: each table defines both macros, includes this file, and undefines them.
DFLASH_FAMILY(dflash_family)
DFLASH_FAMILY_WITH_MODEL(dspark_family, dspark_model)
DFLASH_FAMILY_WITH_MODEL(dflash2_family, dflash2_model)
