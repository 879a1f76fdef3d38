// The folder `dflash export` writes: what transformers and inference engines load a DFlash drafter from.
//   config.json        the drafter config with transformers 5 field names (dtype, rope_parameters,
//                      max_position_embeddings) and an auto_map to dflash.py
//   dflash.py          our modelling code, so AutoModel.from_pretrained(dir, trust_remote_code=True) builds
//                      the DFlash drafter (fc, hidden_norm, KV-injecting layers, norm) and loads every tensor
//   model.safetensors  the weights, unprefixed names, in `dtype`
#pragma once
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "drafter_config.h"
#include "drafter_weights.h"

namespace dflash::train {

// The text of src/train/remote_code/dflash.py, compiled in.
const char* hf_remote_code_source();

// config.json's content for weights stored in `dtype`.
nlohmann::json hf_drafter_config_json(const drafter::DrafterConfig& c, at::ScalarType dtype);

// Writes the three files into out_dir (created if missing), each atomically.
void write_hf_drafter_folder(const std::string& out_dir, const drafter::DrafterConfig& c,
                             const drafter::DrafterWeights& w, at::ScalarType dtype);

}  // namespace dflash::train
