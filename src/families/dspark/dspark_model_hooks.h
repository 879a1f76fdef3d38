// DSpark's torch side (drafter/family_model.h): its heads after the backbone's weights, next-token blocks over all
// B slots with DeepSpec's decay, and DeepSpec's objective (docs/DSPARK.md).
#pragma once

namespace dflash::drafter {
class FamilyModel;
}  // namespace dflash::drafter

namespace dflash::families {

// Declared torch-free, so that the family's torch-free files can hand it out (Family::model()).
const drafter::FamilyModel& dspark_model();

}  // namespace dflash::families
