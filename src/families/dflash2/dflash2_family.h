// DFlash2 (docs/DFLASH2.md, z-lab's contract): DFlash + dynamic block convs and a low-rank candidate selector, whose
// settings (DFlash2Settings) sit in config.json's dflash_config as z-lab writes them.
#pragma once
#include "family.h"

namespace dflash::families {

const drafter::Family& dflash2_family();

}  // namespace dflash::families
