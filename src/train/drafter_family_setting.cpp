#include "drafter_family_setting.h"

#include "drafter_config.h"
#include "drafter_spec.h"

namespace dflash::train {

void resolve_drafter_family(TrainConfig& c, const std::string& command) {
  if (!c.drafter_config.empty()) {
    // The train config's given settings and the drafter config's meet under drafter_spec.h's one rule; the
    // merged spec is the run's (the family, its settings, block size, layers, target layers, draft vocabulary).
    const drafter::DrafterConfig d = drafter::load_drafter_config(c.drafter_config);
    apply_spec(merge_specs(spec_of_train_config(c, d.family), spec_of_drafter_config(d, c.drafter_config), command), c);
  }
  c.drafter_family = c.family();  // settled: the run's train_config.json says it
  c.validate_family_settings();
}

}  // namespace dflash::train
