// The fuzz targets parse configs and never train, and they are built without LibTorch, so the families' torch-side
// hooks (their files in src/families/*/ that include torch) are not compiled in. Their getters are defined here so the
// torch-free *_family.cpp files link; reaching one is a bug of the fuzz build, reported as such.
#include <stdexcept>
#include <string>

#include "dflash2_training.h"
#include "dspark_training.h"

namespace dflash::families {
namespace {
[[noreturn]] void absent(const char* what) {
  throw std::logic_error(std::string(what) + ": a family's torch-side hook was reached in the torch-free fuzz build");
}
}  // namespace

const drafter::FamilyTraining& dspark_training() { absent("dspark_training"); }
const drafter::FamilyTraining& dflash2_training() { absent("dflash2_training"); }

}  // namespace dflash::families
