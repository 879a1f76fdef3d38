#include "sourced_spec.h"

#include <functional>
#include <stdexcept>

#include "family_registry.h"
#include "index_list.h"

namespace dflash::drafter {
namespace {

std::string spec_value_text(int64_t v) { return std::to_string(v); }
std::string spec_value_text(const std::vector<int64_t>& v) { return "[" + util::join_indices(v) + "]"; }
std::string spec_value_text(FamilyRef f) { return f.name(); }
std::string spec_value_text(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

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
  throw std::invalid_argument(command + ": '" + key + "' is " + spec_value_text(into->value) + " (" + into->source +
                              ") but " + spec_value_text(from->value) + " (" + from->source +
                              "); give it once, or the same in both");
}

// One row of the table: how a drafter config gives the field and takes it, and how two specs meet on it.
struct SpecField {
  std::string key;  // the train config's key; errors name it
  std::function<void(DrafterSpec&, const DrafterConfig&, const std::string& source)> from_drafter;
  std::function<void(DrafterSpec&, const DrafterSpec&, const std::string& command)> merge;
  std::function<void(DrafterSpec&, const DrafterSpec&)> over;
  std::function<void(const DrafterSpec&, DrafterConfig&)> to_drafter;
};

// A row of the spec's table (sourced_spec.h: its key and none value) with the drafter config's field (`into`).
template <class T, class DrafterT>
SpecField field(std::optional<Sourced<T>> DrafterSpec::*m, DrafterT DrafterConfig::*into) {
  const SpecRow<T> row = spec_row(m);
  const std::string key = row.key;
  const std::optional<T> none = row.none;
  return {key,
          [=](DrafterSpec& s, const DrafterConfig& d, const std::string& source) {
            const T v = d.*into;
            if (!(none && v == *none)) s.*m = Sourced<T>{v, source};
          },
          [=](DrafterSpec& a, const DrafterSpec& b, const std::string& command) { merge_one(key, a.*m, b.*m, command); },
          [=](DrafterSpec& a, const DrafterSpec& b) {
            if (b.*m) a.*m = b.*m;
          },
          [=](const DrafterSpec& s, DrafterConfig& d) {
            if (s.*m) d.*into = (s.*m)->value;
          }};
}

// The drafter config's field of each row of the table.
const std::vector<SpecField>& spec_fields() {
  using S = DrafterSpec;
  using D = DrafterConfig;
  static const std::vector<SpecField> f = [] {
    std::vector<SpecField> rows = {
        field(&S::family, &D::family),
        field(&S::drafter_layers, &D::num_hidden_layers),
        field(&S::block_size, &D::block_size),
        field(&S::target_layer_ids, &D::target_layer_ids),
        field(&S::draft_vocab, &D::draft_vocab_size),
        field(&S::mask_token_id, &D::mask_token_id),
    };
    if (rows.size() != spec_row_count()) throw std::logic_error("drafter spec: a row without a drafter config field");
    rows.front().to_drafter = [](const DrafterSpec&, DrafterConfig&) {};  // a family comes with its settings
    return rows;
  }();
  return f;
}

}  // namespace

DrafterSpec spec_of_drafter(const DrafterConfig& d, const std::string& source) {
  DrafterSpec s;
  for (const SpecField& f : spec_fields()) f.from_drafter(s, d, source);
  const Family& family = family_of(d.family);
  if (d.family_settings) {
    nlohmann::json j = {{"dflash_config", nlohmann::json::object()}};
    d.family_settings->write(d, j);
    const FamilySettingKeys k = family.setting_keys();
    for (const auto& key : k.top_level)
      if (j.contains(key)) s.extras[key] = {j.at(key), source};
    for (const auto& key : k.in_dflash_config)
      if (j["dflash_config"].contains(key)) s.extras[key] = {j["dflash_config"].at(key), source};
  }
  return s;
}

DrafterSpec spec_of_drafter_config(const DrafterConfig& d, const std::string& path) {
  return spec_of_drafter(d, "drafter config " + path);
}

nlohmann::json shape_settings_of(const DrafterConfig& d) {
  nlohmann::json by_shape = nlohmann::json::object();
  family_of(d.family).shape_defaults(d.hidden_size, by_shape);
  const DrafterSpec s = spec_of_drafter(d, "drafter");
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : by_shape.items())
    if (const auto it = s.extras.find(key); it != s.extras.end()) out[key] = it->second.value;
  return out;
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

DrafterSpec spec_over(DrafterSpec base, const DrafterSpec& over) {
  for (const SpecField& f : spec_fields()) f.over(base, over);
  for (const auto& [key, value] : over.extras) base.extras[key] = value;
  return base;
}

void apply_spec(const DrafterSpec& s, DrafterConfig& d) {
  for (const SpecField& f : spec_fields()) f.to_drafter(s, d);
}

}  // namespace dflash::drafter
