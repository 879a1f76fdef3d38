// The run's drafter settings, settled once before a run: those given in the train config (file, flags) against a
// drafter_config file's, by drafter_spec.h's one rule. Torch-free.
#pragma once
#include <string>

#include "train_config.h"

namespace dflash::train {

// Sets c.drafter_family (never left unset). With a drafter_config, its family, block size, layers, target layers,
// draft vocabulary and the family's own settings (DSpark's heads, DFlash2's convs, ...) are the run's: one given
// in the train config with another value is an error naming both sources and values (drafter_spec.h).
// `command` names the caller in errors ("train", "doctor --config").
void resolve_drafter_family(TrainConfig& c, const std::string& command);

}  // namespace dflash::train
