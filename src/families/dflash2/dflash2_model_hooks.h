// DFlash2's torch side (drafter/family_model.h): its block convs and candidate selector after the backbone's
// weights (identity convs and a no-op selector at the start, or a DFlash drafter as its backbone), the conv-wrapped
// decoder layer, and the unary CE plus alpha x the selector's CE (docs/DFLASH2.md).
#pragma once

namespace dflash::drafter {
class FamilyModel;
}  // namespace dflash::drafter

namespace dflash::families {

// Registered by its family's line in families_list.h.
const drafter::FamilyModel& dflash2_model();

}  // namespace dflash::families
