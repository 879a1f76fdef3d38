#include "family_objective_bench.h"

#include <nlohmann/json.hpp>

#include "family_model.h"

namespace dflash::drafter {

// A family whose objective is the unary one has nothing of its own to compare.
nlohmann::json FamilyModel::benchmark_objective(const ObjectiveBenchSetup& /*s*/) const { return nullptr; }

}  // namespace dflash::drafter
