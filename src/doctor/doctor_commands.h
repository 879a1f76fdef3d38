// The `dflash` commands of the doctor layer: `doctor`, which checks a machine (and a train config) before training.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::doctor {

int doctor_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"doctor"}, "check this machine first: versions, devices, the kernels against their references, speed, "
                   "collectives; --config: a run's shapes and memory plan (docs/DOCTOR.md)", &doctor_main},
  };
}

}  // namespace dflash::doctor
