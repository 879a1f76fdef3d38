// `dflash export`: a training run's latest checkpoint as a Hugging Face drafter folder (hf_export.h: config.json,
// dflash.py, model.safetensors; the layout released DFlash drafters use, loadable by transformers).
#pragma once
#include <string>

namespace dflash::exporting {

// `dtype`: the weights' dtype on disk (any name of util/dtype_names.h); "" = the drafter config's torch_dtype.
void export_run(const std::string& run_dir, const std::string& out_dir, const std::string& dtype);

}  // namespace dflash::exporting
