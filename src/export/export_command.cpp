// `dflash export` (docs/TRAINING.md): a training run's latest checkpoint as an HF drafter folder.
#include <string>
#include <vector>

#include "args.h"
#include "export_commands.h"
#include "export_run.h"

namespace dflash::exporting {

int export_main(const std::vector<std::string>& argv) {
  util::Args a("export", "write a run's latest checkpoint as an HF drafter folder");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("out", "DIR", "", "output folder (config.json + model.safetensors)");
  a.option("dtype", "DTYPE", "", "weights dtype: bf16 | fp32 | fp16 | fp64 (default: the drafter config's torch_dtype)");
  if (!a.parse(argv)) return 0;
  a.require("out");
  export_run(a.str("RUN_DIR"), a.str("out"), a.str("dtype"));
  return 0;
}

}  // namespace dflash::exporting
