// The drafter a run trains, as one spec whose fields are optional and remember where their value came from, so
// that the train config and a drafter config file meet under one rule (docs/TRAINING.md "Where a drafter setting
// comes from"):
//   1. the train config side: the --config file, then the flags over it (flags override the file, as for every
//      setting); only keys given count (TrainConfig::given_from), whatever their value, so `block_size: 16` is
//      given although 16 is the default; a resumed run's saved settings are not given;
//   2. the drafter config file (drafter_config): every field it carries is given.
// merge_specs: a field given on both sides with different values is an error naming both sources and both values;
// a field given once wins over the defaults. One rule for every field of the table (drafter/sourced_spec.cpp), the family's
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
#include "sourced_spec.h"
#include "train_config.h"

namespace dflash::train {

// The spec and its rule live in the drafter layer (drafter/sourced_spec.h), so that `plan` and `bench step` build
// the same spec from a preset or a drafter config and their flags; here: the train config's side of it.
using drafter::DrafterSpec;
using drafter::merge_specs;
using drafter::Sourced;
using drafter::spec_of_drafter_config;

// The fields of `c` given by this invocation (c.given_from), each with its source. The family's settings are
// those of the family given, or of `extras_family` (the drafter config's) when that is set.
DrafterSpec spec_of_train_config(const TrainConfig& c, std::optional<drafter::FamilyRef> extras_family = {});
// Sets each field the spec holds on `c` (typed fields as they are, extras parsed as the train config parses them),
// recording its source in c.given_from.
void apply_spec(const DrafterSpec& s, TrainConfig& c);

// The drafter built from the target (no drafter_config) gets the run's family and that family's settings, read
// from the train config by the family plug-in as from a config.json (Family::read_settings: the same key names).
void apply_family_settings(const TrainConfig& c, drafter::DrafterConfig& d);

}  // namespace dflash::train
