// `dflash export`: a training run's latest checkpoint as a Hugging Face drafter folder (hf_export.h: config.json,
// dflash.py, model.safetensors; the layout released DFlash drafters use, loadable by transformers), checked against
// the serving engines it is meant for (serving_engines.h, docs/SERVING.md).
#pragma once
#include <cstdint>
#include <string>

namespace dflash::exporting {

struct ExportOptions {
  std::string dtype;                    // any name of util/dtype_names.h; "" = the drafter config's torch_dtype
  // --engine: "" (the engines that serve the run's family) | all | a comma list of serving_engines.h's engine_names()
  std::string engines;
  int64_t max_position_embeddings = 0;  // --max-position-embeddings: the target's context length when the run has none
  bool force = false;                   // --force: write into an existing folder export did not make (output_folder.h)
  bool gguf = false;                    // --gguf: also draft.gguf by llama.cpp's converter (llama_cpp_convert.h)
  std::string target;                   // --target: the converter's target ("": the run's train_config.json target)
};

// Refuses an out_dir the output-folder rule refuses (util/output_folder.h: never a model, run or dataset; a folder
// export did not make only with o.force) before reading anything.
void export_run(const std::string& run_dir, const std::string& out_dir, const ExportOptions& o);

}  // namespace dflash::exporting
