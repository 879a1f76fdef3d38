// The git commit this dflash was built from ("ee2f838a1b2c", "-dirty" appended when tracked files had changes),
// or "unknown" for a source tree outside git. Refreshed before every build (cmake/dflash_source_version.cmake);
// only source_version.cpp includes the generated header, so a commit recompiles that file alone.
#pragma once
#include <string>

namespace dflash::doctor {

std::string source_version();

}  // namespace dflash::doctor
