#include "drafter_spec.h"

#include <functional>
#include <stdexcept>

#include "family_registry.h"
#include "index_list.h"

namespace dflash::train {
namespace {

using drafter::DrafterConfig;
using drafter::FamilyRef;

std::string shown(int64_t v) { return std::to_string(v); }
std::string shown(const std::vector<int64_t>& v) { return "[" + util::join_indices(v) + "]"; }
std::string shown(FamilyRef f) { return f.name(); }
std::string shown(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

// The rule, for every field: given on both sides and different is an error naming both; else the one given.
template <class T>
void merge_one(const std::string& key, std::optional<Sourced<T>>& into, const std::optional<Sourced<T>>& from,
               const std::string& command) {
  if (!from) return;
  if (!into) {
    into = from;
    return;
  }
  if (into->value == from->value) return;
  throw std::invalid_argument(command + ": '" + key + "' is " + shown(into->value) + " (" + into->source + ") but " +
                              shown(from->value) + " (" + from->source + "); give it once, or the same in both");
}

template <class T>
std::optional<T> value_of(const T& v) { return v; }
template <class T>
std::optional<T> value_of(const std::optional<T>& v) { return v; }

// One row of the table: how the train config and a drafter config give the field, and where the spec keeps it.
struct SpecField {
  std::string key;  // the train config's key; errors name it
  std::function<void(DrafterSpec&, const TrainConfig&, const std::string& source)> from_train;
  std::function<void(DrafterSpec&, const DrafterConfig&, const std::string& source)> from_file;
  std::function<void(DrafterSpec&, const DrafterSpec&, const std::string& command)> merge;
  std::function<void(const DrafterSpec&, TrainConfig&)> to_train;
};

// `none`: the value that means "not set" on either side (draft_vocab 0, an empty target_layer_ids).
template <class T, class TrainT>
SpecField field(const std::string& key, std::optional<Sourced<T>> DrafterSpec::*m, TrainT TrainConfig::*t,
                T (*of_file)(const DrafterConfig&), std::optional<T> none = std::nullopt) {
  auto set = [=](DrafterSpec& s, const std::optional<T>& v, const std::string& source) {
    if (v && !(none && *v == *none)) s.*m = Sourced<T>{*v, source};
  };
  return {key,
          [=](DrafterSpec& s, const TrainConfig& c, const std::string& source) { set(s, value_of(c.*t), source); },
          [=](DrafterSpec& s, const DrafterConfig& d, const std::string& source) { set(s, of_file(d), source); },
          [=](DrafterSpec& into, const DrafterSpec& from, const std::string& command) {
            merge_one(key, into.*m, from.*m, command);
          },
          [=](const DrafterSpec& s, TrainConfig& c) {
            if (!(s.*m)) return;
            c.*t = (s.*m)->value;
            c.given_from[key] = (s.*m)->source;
          }};
}

// The table: the train config's key, the spec's field, the train config's field, the drafter config's value.
const std::vector<SpecField>& spec_fields() {
  using S = DrafterSpec;
  using C = TrainConfig;
  static const std::vector<SpecField> f = {
      field<FamilyRef>("drafter_family", &S::family, &C::drafter_family, +[](const DrafterConfig& d) { return d.family; }),
      field<int64_t>("drafter_layers", &S::drafter_layers, &C::drafter_layers,
                     +[](const DrafterConfig& d) { return d.num_hidden_layers; }),
      field<int64_t>("block_size", &S::block_size, &C::block_size, +[](const DrafterConfig& d) { return d.block_size; }),
      field<std::vector<int64_t>>("target_layer_ids", &S::target_layer_ids, &C::target_layer_ids,
                                  +[](const DrafterConfig& d) { return d.target_layer_ids; }, std::vector<int64_t>{}),
      field<int64_t>("draft_vocab", &S::draft_vocab, &C::draft_vocab,
                     +[](const DrafterConfig& d) { return d.draft_vocab_size; }, int64_t{0}),
  };
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
  for (const SpecField& f : spec_fields())
    if (const auto it = c.given_from.find(f.key); it != c.given_from.end()) f.from_train(s, c, it->second);
  const nlohmann::json j = to_json(c);
  for (const std::string& key : extra_keys(extras_family.value_or(c.family())))
    if (const auto it = c.given_from.find(key); it != c.given_from.end()) s.extras[key] = {j.at(key), it->second};
  return s;
}

DrafterSpec spec_of_drafter_config(const DrafterConfig& d, const std::string& path) {
  const std::string source = "drafter config " + path;
  DrafterSpec s;
  for (const SpecField& f : spec_fields()) f.from_file(s, d, source);
  const drafter::Family& family = drafter::family_of(d.family);
  if (const auto settings = family.settings_of(d)) {
    nlohmann::json j = {{"dflash_config", nlohmann::json::object()}};
    settings->write(d, j);
    const drafter::FamilySettingKeys k = family.setting_keys();
    for (const auto& key : k.top_level)
      if (j.contains(key)) s.extras[key] = {j.at(key), source};
    for (const auto& key : k.in_dflash_config)
      if (j["dflash_config"].contains(key)) s.extras[key] = {j["dflash_config"].at(key), source};
  }
  return s;
}

DrafterSpec merge_specs(const DrafterSpec& a, const DrafterSpec& b, const std::string& command) {
  DrafterSpec out = a;
  for (const SpecField& f : spec_fields()) f.merge(out, b, command);
  for (const auto& [key, value] : b.extras) {
    std::optional<Sourced<nlohmann::json>> into;
    if (const auto it = out.extras.find(key); it != out.extras.end()) into = it->second;
    merge_one(key, into, std::optional<Sourced<nlohmann::json>>(value), command);
    out.extras[key] = *into;
  }
  return out;
}

void apply_spec(const DrafterSpec& s, TrainConfig& c) {
  for (const SpecField& f : spec_fields()) f.to_train(s, c);
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
  if (const auto settings = family.read_settings(j, j, "train config")) settings->store(d);
}

}  // namespace dflash::train
