#include "family_train_settings.h"

#include <stdexcept>

#include "family.h"
#include "family_registry.h"

namespace dflash::drafter {

const FamilyTrainSettings& Family::train_settings() const {
  static const FamilyTrainSettings none;
  return none;
}

namespace {

// Two declarations of one key fit when they read and default the same.
bool same_setting(const TrainSettingField& a, const TrainSettingField& b) {
  return a.kind == b.kind && a.default_value == b.default_value;
}

void add_fields(const Family& f, std::vector<RegisteredTrainSetting>& out) {
  for (TrainSettingField& field : f.train_settings().fields()) {
    bool shared = false;
    for (RegisteredTrainSetting& r : out)
      if (r.field.key == field.key) {
        if (!same_setting(r.field, field))
          throw std::logic_error("drafter family '" + std::string(f.name()) + "' declares the train setting '" +
                                 field.key + "' as " + field.kind + " " + field.default_value.dump() + ", which '" +
                                 r.owners.front()->name() + "' declares as " + r.field.kind + " " +
                                 r.field.default_value.dump() + " (one key, one meaning)");
        r.owners.push_back(&f);
        shared = true;
      }
    if (!shared) out.push_back({std::move(field), {&f}});
  }
}

}  // namespace

std::vector<RegisteredTrainSetting> registered_train_settings() {
  std::vector<RegisteredTrainSetting> out;
  for (const Family* f : registered_families()) add_fields(*f, out);
  return out;
}

const RegisteredTrainSetting* find_registered_train_setting(const std::vector<RegisteredTrainSetting>& all,
                                                            const std::string& key) {
  for (const RegisteredTrainSetting& r : all)
    if (r.field.key == key) return &r;
  return nullptr;
}

void check_train_settings_fit(const Family& f) {
  std::vector<RegisteredTrainSetting> all = registered_train_settings();
  add_fields(f, all);
}

std::string shown_train_setting(const nlohmann::json& v) {
  return v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump();
}

void validate_family_train_settings(const nlohmann::json& settings, const Family& run_family) {
  const std::vector<RegisteredTrainSetting> all = registered_train_settings();
  for (const Family* f : registered_families()) {
    const bool trains = f == &run_family;
    f->train_settings().validate(settings, trains);
    if (trains) {
      // A family without a draft vocabulary says why (Family::draft_vocab_refusal), for train as for plan.
      const int64_t draft_vocab = settings.at("draft_vocab").get<int64_t>();
      if (*f->draft_vocab_refusal() && draft_vocab != 0)
        throw std::invalid_argument(std::string("train config: 'draft_vocab' must be 0 with drafter_family ") +
                                    f->name() + " (" + f->draft_vocab_refusal() + "), got " +
                                    std::to_string(draft_vocab));
      continue;
    }
    for (const TrainSettingField& field : f->train_settings().fields()) {
      const RegisteredTrainSetting& r = *find_registered_train_setting(all, field.key);
      bool run_family_has_it = false;
      for (const Family* owner : r.owners) run_family_has_it = run_family_has_it || owner == &run_family;
      const nlohmann::json& v = settings.at(field.key);
      if (run_family_has_it || v == field.default_value) continue;
      throw std::invalid_argument("train config: '" + field.key + "' must be its default with drafter_family " +
                                  run_family.name() + " (a " + f->display_name() + " setting: set drafter_family " +
                                  f->name() + "), got " + shown_train_setting(v));
    }
  }
}

}  // namespace dflash::drafter
