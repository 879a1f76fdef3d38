#include "toy_family.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_fields.h"
#include "family_registry.h"
#include "family_train_settings.h"

namespace dflash::families::testing {
namespace {

using drafter::DrafterConfig;

class ToySettings final : public drafter::FamilySettings {
 public:
  explicit ToySettings(int64_t gain) : gain_(gain) {}
  void validate(const DrafterConfig&, const std::string& where) const override {
    if (gain_ < 1 || gain_ > 16) drafter::fail_field(where, "toy_gain", "an integer in [1, 16]", std::to_string(gain_));
  }
  void write(const DrafterConfig&, nlohmann::json& j) const override { j["toy_gain"] = gain_; }

 private:
  int64_t gain_;
};

// --- the toy's train setting (drafter/family_train_settings.h) ---
// `toy_gain` as `dflash train` reads it (--toy-gain, a settings file, train_config.json, resume), declared here
// alone: train's settings table takes it from the registry, with no edit of TrainConfig. The same key as the toy's
// config.json setting, as DSpark's heads are, so a toy run's drafter built from the target takes it.
class ToyTrainSettings final : public drafter::FamilyTrainSettings {
 public:
  std::vector<drafter::TrainSettingField> fields() const override {
    return {{"toy_gain", "int", 1, "toy: the toy family's gain (config.json's toy_gain)"}};
  }
  void validate(const nlohmann::json& settings, bool /*trains*/) const override {
    const int64_t gain = settings.at("toy_gain").get<int64_t>();
    if (gain < 1 || gain > 16)
      throw std::invalid_argument("train config: 'toy_gain' must be in [1, 16], got " + std::to_string(gain));
  }
};
// --- end of the toy's train setting ---

class ToyFamily final : public drafter::Family {
 public:
  const char* name() const override { return "toy"; }
  const char* display_name() const override { return "Toy"; }
  const char* architecture() const override { return "ToyDFlashModel"; }
  const char* draft_vocab_refusal() const override { return "the toy family has no draft vocabulary"; }
  drafter::FamilySettingKeys setting_keys() const override { return {{"toy_gain"}, {}}; }
  std::unique_ptr<drafter::FamilySettings> read_settings(const nlohmann::json& j, const nlohmann::json&,
                                                         const std::string& where) const override {
    return std::make_unique<ToySettings>(drafter::int_field(j, "toy_gain", where, true, 0));
  }
  const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }
  // The toy's train setting (ToyTrainSettings above).
  const drafter::FamilyTrainSettings& train_settings() const override {
    static const ToyTrainSettings settings;
    return settings;
  }
};

}  // namespace

const drafter::Family& toy_family() {
  static const ToyFamily family;
  return family;
}

void register_toy_family() { drafter::register_family(toy_family()); }

}  // namespace dflash::families::testing
