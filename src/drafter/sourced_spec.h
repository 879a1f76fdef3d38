// A drafter's settings as the sources of one command give them: one typed spec whose fields are optional and
// remember their source ("drafter config d.json", "flag --block-size", "preset qwen3-8b", "train config t.yaml:3"),
// and the two ways two specs meet, driven by one field table (sourced_spec.cpp):
//   - merge_specs, the rule between sources: a field given on both sides with different values is an error naming
//     both sources and both values; a field given once is taken;
//   - spec_over, one source's own precedence (flags over the preset or settings file they come with): each field the
//     second gives replaces the first's.
// `dflash train` fills it from its train config (train/drafter_spec.h), `plan` and `bench step` from their preset or
// drafter config and their flags. Torch-free.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drafter_config.h"

namespace dflash::drafter {

// A value and its source, as errors name it.
template <class T>
struct Sourced {
  T value;
  std::string source;
};

struct DrafterSpec {
  std::optional<Sourced<FamilyRef>> family;              // drafter_family / config.json's architectures
  std::optional<Sourced<int64_t>> drafter_layers;         // drafter_layers / num_hidden_layers
  std::optional<Sourced<int64_t>> block_size;
  std::optional<Sourced<std::vector<int64_t>>> target_layer_ids;
  std::optional<Sourced<int64_t>> draft_vocab;            // draft_vocab / draft_vocab_size (0: none given)
  std::optional<Sourced<int64_t>> mask_token_id;          // mask_token_id / dflash_config.mask_token_id (-1: none)
  // The family's own config.json settings (Family::setting_keys), keyed as the train
  // config names them (the same names), valued as to_json(TrainConfig) writes them.
  std::map<std::string, Sourced<nlohmann::json>> extras;
};

// Every field a drafter config carries (an empty target_layer_ids, draft_vocab_size 0 and mask_token_id -1 are
// none), each from `source`: "preset qwen3-8b" for a preset's drafter.
DrafterSpec spec_of_drafter(const DrafterConfig& d, const std::string& source);
// The same for a drafter config file; `path` names it ("drafter config <path>").
DrafterSpec spec_of_drafter_config(const DrafterConfig& d, const std::string& path);
// The values `d` holds for its family's settings that follow the shape (Family::shape_defaults: a head rank), by
// their config key: what a run built from `d` saves as its settings.
nlohmann::json shape_settings_of(const DrafterConfig& d);
// One spec of two: throws std::invalid_argument "<command>: 'block_size' is 16 (train config t.yaml) but 8
// (drafter config d.json); give it once, or the same in both" on the first field given twice differently.
DrafterSpec merge_specs(const DrafterSpec& a, const DrafterSpec& b, const std::string& command);
// `base` with each field `over` gives replaced by `over`'s (one source's precedence, never an error).
DrafterSpec spec_over(DrafterSpec base, const DrafterSpec& over);
// Sets the typed fields the spec holds on `d` (layers, block size, target layers, draft vocabulary, mask token).
// The family and its settings are not set here: a family is taken with drafter_as_family / the family plug-in.
void apply_spec(const DrafterSpec& s, DrafterConfig& d);

}  // namespace dflash::drafter
