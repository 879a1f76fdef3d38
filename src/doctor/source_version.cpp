#include "source_version.h"

#include "dflash_source_version.h"

namespace dflash::doctor {

std::string source_version() { return DFLASH_SOURCE_VERSION; }

}  // namespace dflash::doctor
