#include "drafter_spec.h"

#include <functional>
#include <stdexcept>

#include "family_registry.h"

namespace dflash::train {
namespace {

using drafter::DrafterConfig;
using drafter::FamilyRef;

template <class T>
std::optional<T> value_of(const T& v) { return v; }
template <class T>
std::optional<T> value_of(const std::optional<T>& v) { return v; }

// The train config's side of a row of the spec's table (drafter/sourced_spec.cpp holds the rule and the drafter
// config's side): which TrainConfig field gives and takes the spec's field.
struct TrainField {
  std::string key;  // the train config's key
  std::function<void(DrafterSpec&, const TrainConfig&, const std::string& source)> from_train;
  std::function<void(const DrafterSpec&, TrainConfig&)> to_train;
};

// A row of the spec's table (drafter/sourced_spec.h: its key) with the train config's field. A key given counts
// whatever its value (drafter_spec.h): the table's none values are the drafter config file's, which cannot leave a
// field out; `draft_vocab: 0` or `--draft-vocab 0` beside a drafter config's K is two values, an error naming both.
template <class T, class TrainT>
TrainField field(std::optional<Sourced<T>> DrafterSpec::*m, TrainT TrainConfig::*t) {
  const std::string key = drafter::spec_row(m).key;
  return {key,
          [=](DrafterSpec& s, const TrainConfig& c, const std::string& source) {
            if (const std::optional<T> v = value_of(c.*t)) s.*m = Sourced<T>{*v, source};
          },
          [=](const DrafterSpec& s, TrainConfig& c) {
            if (!(s.*m)) return;
            c.*t = (s.*m)->value;
            c.given_from[key] = (s.*m)->source;
          }};
}

// The train config's field of each row of the table.
const std::vector<TrainField>& train_fields_of_spec() {
  using S = DrafterSpec;
  using C = TrainConfig;
  static const std::vector<TrainField> f = [] {
    std::vector<TrainField> rows = {
        field(&S::family, &C::drafter_family),
        field(&S::drafter_layers, &C::drafter_layers),
        field(&S::block_size, &C::block_size),
        field(&S::target_layer_ids, &C::target_layer_ids),
        field(&S::draft_vocab, &C::draft_vocab),
        field(&S::mask_token_id, &C::mask_token_id),
    };
    if (rows.size() != drafter::spec_row_count())
      throw std::logic_error("drafter spec: a row without a train config field");
    return rows;
  }();
  return f;
}

// The keys of a family's own settings, as config.json and the train config both name them.
std::vector<std::string> extra_keys(FamilyRef f) {
  const drafter::FamilySettingKeys k = drafter::family_of(f).setting_keys();
  std::vector<std::string> keys = k.top_level;
  keys.insert(keys.end(), k.in_dflash_config.begin(), k.in_dflash_config.end());
  return keys;
}

}  // namespace

DrafterSpec spec_of_train_config(const TrainConfig& c, std::optional<FamilyRef> extras_family) {
  DrafterSpec s;
  for (const TrainField& f : train_fields_of_spec())
    if (const auto it = c.given_from.find(f.key); it != c.given_from.end()) f.from_train(s, c, it->second);
  const nlohmann::json j = to_json(c);
  for (const std::string& key : extra_keys(extras_family.value_or(c.family())))
    if (const auto it = c.given_from.find(key); it != c.given_from.end()) s.extras[key] = {j.at(key), it->second};
  return s;
}

void apply_spec(const DrafterSpec& s, TrainConfig& c) {
  for (const TrainField& f : train_fields_of_spec()) f.to_train(s, c);
  for (const auto& [key, value] : s.extras) apply_json(c, {{key, value.value}}, value.source);
}

void apply_family_settings(const TrainConfig& c, DrafterConfig& d) {
  d.family = c.family();
  const drafter::Family& family = drafter::family_of(d.family);
  nlohmann::json j = to_json(c);
  // A setting that follows the drafter's shape (a head rank scales with the hidden size) and was not given takes
  // the family's value for this drafter.
  nlohmann::json by_shape = nlohmann::json::object();
  family.shape_defaults(d.hidden_size, by_shape);
  for (const auto& [key, value] : by_shape.items())
    if (!c.was_given(key)) j[key] = value;
  d.family_settings = family.read_settings(j, j, "train config");
  if (!d.family_settings) d.family_settings = family.default_settings(d.hidden_size);  // none of its keys given
}

}  // namespace dflash::train
