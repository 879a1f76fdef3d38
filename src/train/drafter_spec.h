// The drafter a run trains, as one spec whose fields are optional and remember where their value came from, so
// that the train config and a drafter config file meet under one rule (docs/TRAINING.md "Where a drafter setting
// comes from"):
//   1. the train config side: the --config file, then the flags over it (flags override the file, as for every
//      setting); only keys given count (TrainConfig::given_from), whatever their value, so `block_size: 16` is
//      given although 16 is the default; a resumed run's saved settings are not given;
//   2. the drafter config file (drafter_config): every field it carries is given.
// merge_specs: a field given on both sides with different values is an error naming both sources and both values;
// a field given once wins over the defaults. One rule for every field of the table (drafter_spec.cpp), the family's
// own settings included: which those are is the family plug-in's answer (Family::setting_keys), not a list here.
// Torch-free.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drafter_config.h"
#include "train_config.h"

namespace dflash::train {

// A value and its source, as errors name it: "train config t.yaml:3", "flag --block-size", "drafter config d.json".
template <class T>
struct Sourced {
  T value;
  std::string source;
};

struct DrafterSpec {
  std::optional<Sourced<drafter::FamilyRef>> family;       // drafter_family / config.json's architectures
  std::optional<Sourced<int64_t>> drafter_layers;         // drafter_layers / num_hidden_layers
  std::optional<Sourced<int64_t>> block_size;
  std::optional<Sourced<std::vector<int64_t>>> target_layer_ids;
  std::optional<Sourced<int64_t>> draft_vocab;            // draft_vocab / draft_vocab_size (0: none given)
  // The family's own config.json settings (DSpark's heads, DFlash2's convs and selector), keyed as the train
  // config names them (the same names), valued as to_json(TrainConfig) writes them.
  std::map<std::string, Sourced<nlohmann::json>> extras;
};

// The fields of `c` given by this invocation (c.given_from), each with its source. The family's settings are
// those of the family given, or of `extras_family` (the drafter config's) when that is set.
DrafterSpec spec_of_train_config(const TrainConfig& c, std::optional<drafter::FamilyRef> extras_family = {});
// Every field a drafter config carries; `path` names it ("drafter config <path>").
DrafterSpec spec_of_drafter_config(const drafter::DrafterConfig& d, const std::string& path);
// One spec of two: throws std::invalid_argument "<command>: 'block_size' is 16 (train config t.yaml) but 8
// (drafter config d.json); give it once, or the same in both" on the first field given twice differently.
DrafterSpec merge_specs(const DrafterSpec& a, const DrafterSpec& b, const std::string& command);
// Sets each field the spec holds on `c` (typed fields as they are, extras parsed as the train config parses them),
// recording its source in c.given_from.
void apply_spec(const DrafterSpec& s, TrainConfig& c);

// The drafter built from the target (no drafter_config) gets the run's family and that family's settings, read
// from the train config by the family plug-in as from a config.json (Family::read_settings: the same key names).
void apply_family_settings(const TrainConfig& c, drafter::DrafterConfig& d);

}  // namespace dflash::train
