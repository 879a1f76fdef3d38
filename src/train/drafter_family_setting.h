// The run's drafter family, settled once before a run: `drafter_family` as given over the family that the
// drafter_config file's architectures name. Torch-free.
#pragma once
#include <string>

#include "train_config.h"

namespace dflash::train {

// Sets c.drafter_family (never left unset): a drafter_config whose architectures name a family sets it, and a
// family given that disagrees is an error naming both. With a DSpark drafter_config, its heads (markov_rank, ...)
// are the run's: a head setting given that differs from the file's is an error naming the file, field and value.
// `command` names the caller in errors ("train", "doctor --config").
void resolve_drafter_family(TrainConfig& c, const std::string& command);

}  // namespace dflash::train
