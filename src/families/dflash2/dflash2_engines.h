// DFlash2's rows of the serving-engine rule (drafter/serving_engines.h): how each engine that serves it reads an
// export, checked against tests/python/engine_readers.py by tests/python/test_export_engines.py. Torch-free.
#pragma once
#include <vector>

#include "serving_engines.h"

namespace dflash::families {

std::vector<drafter::EngineRule> dflash2_engine_rules();

}  // namespace dflash::families
