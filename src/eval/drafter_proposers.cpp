#include "drafter_proposers.h"

#include <map>
#include <string>

#include "dflash2_proposer.h"
#include "dspark_proposer.h"
#include "family_registry.h"

namespace dflash::eval {
namespace {

using Maker = std::unique_ptr<Proposer> (*)(const LoadedDrafter&, const models::TargetModel&,
                                            const DrafterProposerOptions&);

// A family whose drafting differs from DFlash's is one line here (its proposer lives in eval: it reads the target
// model and the decode's sampler, layers above the family folders).
const std::map<std::string, Maker>& proposers_by_family() {
  static const std::map<std::string, Maker> table = {
      {"dspark",
       [](const LoadedDrafter& d, const models::TargetModel& t, const DrafterProposerOptions& o) -> std::unique_ptr<Proposer> {
         return std::make_unique<DSparkProposer>(d, t, o.max_draft, o.attention, o.confidence_threshold);
       }},
      {"dflash2",
       [](const LoadedDrafter& d, const models::TargetModel& t, const DrafterProposerOptions& o) -> std::unique_ptr<Proposer> {
         return std::make_unique<DFlash2Proposer>(d, t, o.max_draft, o.attention);
       }},
  };
  return table;
}

}  // namespace

std::unique_ptr<Proposer> make_drafter_proposer(const LoadedDrafter& d, const models::TargetModel& target,
                                                const DrafterProposerOptions& o) {
  const auto& table = proposers_by_family();
  const auto it = table.find(drafter::family_of(d.config.family).name());
  if (it != table.end()) return it->second(d, target, o);
  return std::make_unique<DFlashProposer>(d, target, o.max_draft, o.attention);
}

}  // namespace dflash::eval
