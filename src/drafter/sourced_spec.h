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
#include <stdexcept>
#include <string>
#include <type_traits>
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

// The spec's typed fields, one row each: the key errors name (the train config's), the spec's field, and the value
// that says "not given" in a drafter config file, which cannot leave draft_vocab_size, target_layer_ids or
// mask_token_id out (0, empty and -1 say none). The one list of keys and none values: the drafter config's side
// (sourced_spec.cpp) and the train config's (train/drafter_spec.cpp) each map the spec's fields to their own
// config's and take the rest from here (spec_row); each checks it maps every row (spec_row_count). The none values
// are the drafter config file's alone: a train config key or a flag given counts whatever its value (0 too).
template <class T>
struct SpecRow {
  const char* key;
  std::optional<Sourced<T>> DrafterSpec::*field;
  std::optional<T> none;
};

// Calls visit(row) on each row, in the table's order; visit takes a SpecRow of each field type.
template <class Visit>
void for_each_spec_row(Visit&& visit) {
  using S = DrafterSpec;
  visit(SpecRow<FamilyRef>{"drafter_family", &S::family, std::nullopt});
  visit(SpecRow<int64_t>{"drafter_layers", &S::drafter_layers, std::nullopt});
  visit(SpecRow<int64_t>{"block_size", &S::block_size, std::nullopt});
  visit(SpecRow<std::vector<int64_t>>{"target_layer_ids", &S::target_layer_ids, std::vector<int64_t>{}});
  visit(SpecRow<int64_t>{"draft_vocab", &S::draft_vocab, int64_t{0}});
  visit(SpecRow<int64_t>{"mask_token_id", &S::mask_token_id, int64_t{-1}});
}

inline size_t spec_row_count() {
  size_t n = 0;
  for_each_spec_row([&](const auto&) { ++n; });
  return n;
}

// The row of a spec field; std::logic_error for a field the table lacks (a DrafterSpec field added without its row).
template <class T>
SpecRow<T> spec_row(std::optional<Sourced<T>> DrafterSpec::*field) {
  std::optional<SpecRow<T>> found;
  for_each_spec_row([&](const auto& row) {
    if constexpr (std::is_same_v<std::decay_t<decltype(row)>, SpecRow<T>>)
      if (row.field == field) found = row;
  });
  if (!found) throw std::logic_error("drafter spec: a field without a row in for_each_spec_row");
  return *found;
}

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
