// The `dflash` commands of the ops layer: the fused attention against the other ways to run the DFlash mask.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::ops {

int bench_attention_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"bench", "attention"}, "fused anchor-block attention vs dense / per-block SDPA / flex, time and memory",
       &bench_attention_main},
  };
}

}  // namespace dflash::ops
