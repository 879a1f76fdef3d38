// A family's own `dflash train` settings (DSpark's heads and loss weights, DFlash2's convs and selector, a plug-in's):
// the keys a family declares, which train's settings table (train/train_config.h) adds to its own fields, so that a
// family with a train setting needs no edit of TrainConfig. Each family implements FamilyTrainSettings in its folder
// and returns it from Family::train_settings(). Torch-free.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dflash::drafter {

class Family;

struct TrainSettingField {
  TrainSettingField(std::string key_, std::string kind_, nlohmann::json default_, std::string help_)
      : key(std::move(key_)), kind(std::move(kind_)), default_value(std::move(default_)), help(std::move(help_)) {}
  std::string key;    // snake_case, as train_config.json writes it; the flag is --key with '_' -> '-'
  std::string kind;   // "int", "float", "bool" or "str", as train's FieldInfo writes them
  nlohmann::json default_value;  // of the kind (str: its canonical spelling)
  std::string help;
  // A str setting with a grammar: whether `text` is one of its spellings, and what it must be otherwise ("vanilla,
  // gated or rnn"); unset: any text.
  std::function<bool(const std::string&)> accepts;
  std::string spellings;
  // true: its default follows the drafter's hidden size (Family::shape_defaults: a head rank), so a resumed run keeps
  // the value its drafter was built with (the saved weights' shape) rather than the rule's.
  bool follows_drafter_shape = false;
};

class FamilyTrainSettings {
 public:
  virtual ~FamilyTrainSettings() = default;
  // The family's settings, in the order --help lists them.
  virtual std::vector<TrainSettingField> fields() const { return {}; }
  // Checks the family's values in `settings` (the run's settings, every key as train_config.json writes them): their
  // ranges always, and with `trains` (the run's family is this one) how they combine with each other and with train's
  // own settings. Throws std::invalid_argument "train config: '<key>' must be ..., got ...".
  virtual void validate(const nlohmann::json& /*settings*/, bool /*trains*/) const {}
};

// A registered family's train setting and the families that declare it (two families may share a key they declare
// identically: same kind and default).
struct RegisteredTrainSetting {
  TrainSettingField field;
  std::vector<const Family*> owners;
};
// Every registered family's train settings, families in registration order, each key once.
std::vector<RegisteredTrainSetting> registered_train_settings();
// The one registered setting `key`; nullptr: none.
const RegisteredTrainSetting* find_registered_train_setting(const std::vector<RegisteredTrainSetting>& all,
                                                            const std::string& key);
// Throws std::logic_error when `f` declares a key that a registered family declares with another kind or default
// (register_family calls it before adding `f`).
void check_train_settings_fit(const Family& f);
// The run's family settings checked: each family's validate(), then each setting of a family other than `run_family`
// at its default ("train config: 'markov_rank' must be its default with drafter_family dflash (a DSpark setting: set
// drafter_family dspark), got 8"): one given to another family would be dropped unsaid.
void validate_family_train_settings(const nlohmann::json& settings, const Family& run_family);
// A value of a train setting as messages show it: 8, 0.5, true, 'inject'.
std::string shown_train_setting(const nlohmann::json& v);

}  // namespace dflash::drafter
