// The `dflash` commands of the models layer: run the target on its own.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::models {

int target_run_main(const std::vector<std::string>& args);
int target_generate_main(const std::vector<std::string>& args);
int target_rope_main(const std::vector<std::string>& args);
int target_hf_folder_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"target", "run"}, "run the target on token ids, save logits and hidden states (tests)", &target_run_main},
      {{"target", "generate"}, "greedy generation with the target model, reports tokens/s", &target_generate_main},
      {{"target", "hf-folder"}, "a GGUF target's config.json + tokenizer files (llama.cpp's converter reads them)",
       &target_hf_folder_main},
      {{"target", "rope"}, "internal: RoPE frequencies and tables of a config.json (tests)", &target_rope_main},
  };
}

}  // namespace dflash::models
