// What `dflash data dump-hidden` and `dflash data regenerate --hidden-out` share: which target layers the
// drafter's features come from, the metadata their shards record, and one sample's features by a target
// forward (the reference both are tested against).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "hidden_shards.h"
#include "target_config.h"
#include "target_model.h"

namespace dflash::data {

// --target-layer-ids as given (comma list), or the default for `drafter_layers` (docs/DFLASH.md) when empty; every
// id must be one of the target's layers (the error names the flag and the layer count).
std::vector<int64_t> feature_layer_ids(const std::string& flag, int64_t drafter_layers, const models::TargetConfig& cfg);

// The shard metadata for features of `target_path` (its identity: file name, family, sizes).
HiddenMeta feature_meta(const std::string& target_path, const models::TargetConfig& cfg,
                        const std::vector<int64_t>& layer_ids);

// The outputs of `layers` for every position of `ids`, concatenated in that order: [S, n*H] on the CPU, in the
// model's dtype. `last_hidden` (optional) receives the final-normed last hidden state [S, H].
at::Tensor sample_features(const models::TargetModel& model, const std::vector<int64_t>& ids,
                           const std::vector<int>& layers, at::Tensor* last_hidden = nullptr);
// The same from a finished forward of one sequence (o.hidden holds `layers`), e.g. one that ran in pipeline stages.
at::Tensor features_of(const models::TargetOutput& o, const std::vector<int>& layers, at::Tensor* last_hidden = nullptr);

}  // namespace dflash::data
