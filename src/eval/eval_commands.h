// The `dflash` commands of the evaluation layer: speculative decoding with a drafter, target decode speed.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::eval {

int eval_main(const std::vector<std::string>& args);
int bench_decode_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"eval"}, "speculative decoding with a drafter: tau, speedup, lossless check per dataset", &eval_main},
      {{"bench", "decode"}, "target greedy decode tokens/s: dflash vs Hugging Face transformers", &bench_decode_main},
  };
}

}  // namespace dflash::eval
