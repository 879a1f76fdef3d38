#include "family_cost.h"

#include "family_registry.h"

namespace dflash::drafter {

const FamilyCost& Family::cost() const {
  static const FamilyCost backbone_only;
  return backbone_only;
}

const FamilyCost& family_cost(const DrafterConfig& c) { return family_of(c.family).cost(); }

}  // namespace dflash::drafter
