// The folder `dflash export` writes: what transformers and inference engines load a drafter from.
//   config.json        the drafter config with transformers 5 field names (dtype, rope_parameters,
//                      max_position_embeddings = the target's context length, required; rope_theta + rope_scaling
//                      too, for transformers 4 readers), block_size at the top level and in dflash_config (equal:
//                      engines read one or the other first, docs/SERVING.md) and an auto_map to the remote code
//   dflash.py          our modelling code, so AutoModel.from_pretrained(dir, trust_remote_code=True) builds
//                      the drafter (fc, hidden_norm, KV-injecting layers, norm) and loads every tensor;
//   dspark.py /        DSpark's heads / DFlash2's convs and selector on top of dflash.py's backbone, for those
//   dflash2.py         families (engines load them by `architectures`, not by auto_map)
//   model.safetensors  the weights, unprefixed names, in `dtype`; a draft vocabulary adds lm_head.weight [K, H]
//                      (in `dtype`), d2t int64 [K] and t2d bool [V] (draft_vocab.h, the names vLLM loads)
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "draft_vocab.h"
#include "drafter_config.h"
#include "drafter_weights.h"

namespace dflash::exporting {

struct RemoteCodeFile {
  const char* name;  // the file name in the export folder
  const char* text;  // src/families/<family>/remote_code/<name>, compiled in
};
// The modelling files a family's export carries (dflash.py first), and the class its auto_map names.
std::vector<RemoteCodeFile> hf_remote_code_files(drafter::FamilyRef f);
const char* hf_remote_code_class(drafter::FamilyRef f);

// config.json's content for weights stored in `dtype`; throws when c.max_position_embeddings is unknown (0).
// is_causal (false) only for a drafter without sliding_attention layers. num_anchors: the run's anchors per sequence,
// written for DSpark (DeepSpec's Qwen3DSparkModel requires it; a DSpark config without it is refused), unused
// otherwise.
nlohmann::json hf_drafter_config_json(const drafter::DrafterConfig& c, at::ScalarType dtype, int64_t num_anchors = 0);

// Writes the three files into out_dir: staged in a hidden folder beside it, then moved in (the whole folder at once
// when out_dir is new, file by file with config.json last when it replaces an export). A failure leaves nothing.
// `draft`: for c.draft_vocab_size > 0, the draft vocabulary (draft_ids and the lm_head rows); else unused.
// `num_anchors`: as hf_drafter_config_json's.
void write_hf_drafter_folder(const std::string& out_dir, const drafter::DrafterConfig& c,
                             const drafter::DrafterWeights& w, at::ScalarType dtype, const train::DraftVocabFile& draft = {},
                             int64_t num_anchors = 0);

}  // namespace dflash::exporting
