// The `dflash` commands of the planning layer: the memory plan (and a node's split), and the benchmarks that
// hold the planner's figures against measurement.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::plan {

int plan_main(const std::vector<std::string>& args);
int bench_step_main(const std::vector<std::string>& args);
int bench_flops_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"plan"}, "predicted peak training memory of the drafter (breakdown, --budget, presets)", &plan_main},
      {{"bench", "step"}, "drafter forward+backward per checkpoint policy: time, measured vs planned memory",
       &bench_step_main},
      {{"bench", "flops"}, "the FLOP model of plan --node vs measured time: target forward, drafter step, GEMM rate",
       &bench_flops_main},
  };
}

}  // namespace dflash::plan
