// `dflash export --gguf`: the export folder through llama.cpp's own converter (convert_hf_to_gguf.py
// --target-model-dir), kept as draft.gguf beside config.json (docs/SERVING.md). Never a GGUF writer of ours.
#pragma once
#include <string>

#include <c10/core/ScalarType.h>

namespace dflash::exporting {

// What the converter reads the drafter's target from (the tokenizer, hidden size, vocabulary): an HF target folder
// as it is; for a GGUF target, its config.json + tokenizer files written by models::write_target_hf_folder into a
// temporary folder that lives as long as this. Built before the export writes anything, so a missing converter,
// target or tokenizer that cannot be written is refused first.
class ConverterTarget {
 public:
  // target: --target, or "" for the run's train_config.json `target`.
  ConverterTarget(const std::string& run_dir, const std::string& target);
  ~ConverterTarget();
  ConverterTarget(const ConverterTarget&) = delete;
  ConverterTarget& operator=(const ConverterTarget&) = delete;
  const std::string& dir() const { return dir_; }
  const std::string& converter() const { return converter_; }

 private:
  std::string converter_, dir_, temp_;
};

// out_dir/draft.gguf (the name every command looks for).
std::string draft_gguf_path(const std::string& out_dir);
void remove_draft_gguf(const std::string& out_dir);

// Runs the converter on the written export folder into draft.gguf (f32 for fp32/fp64 weights, else their dtype).
// A failure throws with the converter's last error line; the export folder stays complete and no draft.gguf is left.
std::string convert_to_gguf(const std::string& export_dir, const ConverterTarget& target, at::ScalarType dtype);

}  // namespace dflash::exporting
