// `dflash target hf-folder`: a GGUF target's config.json + tokenizer files (target_hf_folder.h), the folder
// llama.cpp's converter takes as --target-model-dir.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "atomic_output.h"
#include "models_commands.h"
#include "target_hf_folder.h"

namespace dflash::models {

int target_hf_folder_main(const std::vector<std::string>& args) {
  util::Args a("target hf-folder",
               "write a GGUF target's config.json, tokenizer.json and tokenizer_config.json (llama.cpp's converter "
               "reads a drafter's target from them)");
  a.option("target", "PATH", "", "the target GGUF file");
  a.option("out", "DIR", "", "output folder");
  if (!a.parse(args)) return 0;
  a.require("target");
  if (!a.given("out")) a.require("out");
  io::check_output_folder(a.str("out"), "target hf-folder: --out");
  write_target_hf_folder(a.str("target"), a.str("out"));
  std::fprintf(stderr, "wrote %s/{config.json,tokenizer.json,tokenizer_config.json}\n", a.str("out").c_str());
  return 0;
}

}  // namespace dflash::models
