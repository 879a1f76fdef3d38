// DFlash (docs/DFLASH.md): the backbone every family builds on; no settings of its own, a draft vocabulary allowed.
#pragma once
#include "family.h"

namespace dflash::families {

const drafter::Family& dflash_family();

}  // namespace dflash::families
