// `dflash export` (docs/TRAINING.md, docs/SERVING.md): a training run's latest checkpoint as an HF drafter folder.
#include <string>
#include <vector>

#include "args.h"
#include "drafter_config.h"
#include "family_registry.h"
#include "export_commands.h"
#include "export_run.h"
#include "output_folder.h"

namespace dflash::exporting {

int export_main(const std::vector<std::string>& argv) {
  util::Args a("export", "write a run's latest checkpoint as an HF drafter folder");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("out", "DIR", "", "output folder (config.json + model.safetensors)");
  a.option("dtype", "DTYPE", "", "weights dtype: bf16 | fp32 | fp16 | fp64 (default: the drafter config's torch_dtype)");
  a.option("engine", "NAMES", "",
           "all | sglang | vllm | llama.cpp | zlab | speculators, or a comma list: refuse an export any of them would "
           "read differently from what was trained (docs/SERVING.md; default: the engines that serve the run's "
           "family); vllm alone allows a --draft-vocab run");
  a.flag("gguf", "also convert the folder with llama.cpp's own converter into DIR/draft.gguf (checks llama.cpp as "
                 "an engine; needs scripts/setup.sh's llama.cpp build)");
  a.option("target", "PATH", "",
           "with --gguf: the target the converter reads the tokenizer from, HF folder or .gguf (default: the run's "
           "train_config.json target)");
  a.option("max-position-embeddings", "N", "0",
           "the target's context length, for a run that does not know it (a GGUF target without context_length)");
  a.option("drafter-family", "NAME", "", "dflash | dspark | dflash2 (default: the run's drafter_config.json)");
  a.flag("force", "write into an existing folder export did not make (only the export's files are replaced; a "
                  "model, run or dataset folder is refused even then)");
  a.range("max-position-embeddings", 0, 2147483647, " (0: the target's)");
  if (!a.parse(argv)) return 0;
  if (!a.given("out")) a.require("out");  // given empty: the output-folder check names it, as for any folder
  // Before the checkpoint is read: never into a model, run or dataset, nor a folder it did not make unless --force.
  util::check_output_folder_use(a.str("out"), "export: --out", util::OutputFolderUse::Export, a.on("force"));
  // The run's family, before its checkpoint: a --drafter-family that is not the run's is refused in one line.
  // Every family exports (dflash and dflash2 in z-lab's contract, dspark in DeepSpec's: docs/SERVING.md).
  const std::string config = a.str("RUN_DIR") + "/drafter_config.json";
  drafter::family_for_command("export", a.str("drafter-family"), drafter::load_drafter_config(config).family, config);
  ExportOptions o;
  o.dtype = a.str("dtype");
  o.engines = a.str("engine");
  o.max_position_embeddings = a.i64("max-position-embeddings");
  o.force = a.on("force");
  o.gguf = a.given("gguf");
  if (!o.gguf) a.refuse_given({"target"}, "without --gguf (only the converter reads the target)");
  o.target = a.str("target");
  export_run(a.str("RUN_DIR"), a.str("out"), o);
  return 0;
}

}  // namespace dflash::exporting
