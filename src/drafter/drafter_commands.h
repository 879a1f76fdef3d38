// The `dflash` commands of the drafter layer: a test entry point that runs one training step of the drafter.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::drafter {

int selftest_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"drafter", "selftest"}, "internal: one drafter training step on a saved batch (tests)", &selftest_main},
  };
}

}  // namespace dflash::drafter
