// DSpark's torch side (drafter/family_model.h): its heads after the backbone's weights, next-token blocks over all
// B slots with DeepSpec's decay, and DeepSpec's objective (docs/DSPARK.md).
#pragma once

namespace dflash::drafter {
class FamilyModel;
}  // namespace dflash::drafter

namespace dflash::families {

// Registered by its family's line in families_list.h.
const drafter::FamilyModel& dspark_model();

}  // namespace dflash::families
