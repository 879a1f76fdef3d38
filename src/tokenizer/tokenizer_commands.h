// The `dflash` commands of the tokenizer layer.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::tok {

int tokenize_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"tokenize"}, "tokenize JSONL text (or chat) with a GGUF or tokenizer.json vocabulary", &tokenize_main},
  };
}

}  // namespace dflash::tok
