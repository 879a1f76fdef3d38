// The `dflash` commands of the drafter layer: memory plan, training-step benchmark, and a test entry point.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::drafter {

int plan_main(const std::vector<std::string>& args);
int bench_step_main(const std::vector<std::string>& args);
int bench_flops_main(const std::vector<std::string>& args);
int selftest_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"plan"}, "predicted peak training memory of the drafter (breakdown, --budget, presets)", &plan_main},
      {{"bench", "step"}, "drafter forward+backward per checkpoint policy: time, measured vs planned memory",
       &bench_step_main},
      {{"bench", "flops"}, "the FLOP model of plan --node vs measured time: target forward, drafter step, GEMM rate",
       &bench_flops_main},
      {{"drafter", "selftest"}, "internal: one drafter training step on a saved batch (tests)", &selftest_main},
  };
}

}  // namespace dflash::drafter
