// `dflash export` (docs/TRAINING.md): a training run's latest checkpoint as an HF drafter folder.
#include <string>
#include <vector>

#include "args.h"
#include "drafter_config.h"
#include "drafter_family.h"
#include "export_commands.h"
#include "export_run.h"

namespace dflash::exporting {

int export_main(const std::vector<std::string>& argv) {
  util::Args a("export", "write a run's latest checkpoint as an HF drafter folder");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("out", "DIR", "", "output folder (config.json + model.safetensors)");
  a.option("dtype", "DTYPE", "", "weights dtype: bf16 | fp32 | fp16 | fp64 (default: the drafter config's torch_dtype)");
  a.option("drafter-family", "NAME", "", "dflash | dspark | dflash2 (default: the run's drafter_config.json; only dflash so far)");
  if (!a.parse(argv)) return 0;
  a.require("out");
  // The run's family, before its checkpoint: a family export cannot write yet is refused in one line.
  const std::string config = a.str("RUN_DIR") + "/drafter_config.json";
  drafter::refuse_unsupported_family(
      "export", drafter::family_for_command("export", a.str("drafter-family"), drafter::load_drafter_config(config).family,
                                            config));
  export_run(a.str("RUN_DIR"), a.str("out"), a.str("dtype"));
  return 0;
}

}  // namespace dflash::exporting
