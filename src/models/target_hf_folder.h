// A GGUF target as the Hugging Face folder llama.cpp's converter reads a draft model's target from
// (`--target-model-dir`): config.json from our reading of the GGUF's architecture, tokenizer.json and
// tokenizer_config.json from our tokenizer of its tokenizer.ggml.* metadata (`dflash target hf-folder`,
// `dflash export --gguf`; docs/SERVING.md). No weights: the converter reads none from there.
#pragma once
#include <string>

namespace dflash::models {

// Writes the three files into out_dir (created when missing). A GGUF whose architecture or tokenizer has no such
// form (not Llama / Qwen3 / Qwen3-MoE, not byte-level BPE) is refused naming the file, before anything is written.
void write_target_hf_folder(const std::string& gguf_path, const std::string& out_dir);

}  // namespace dflash::models
