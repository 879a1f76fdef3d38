#include "toy_family.h"

#include <cmath>
#include <memory>
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

// --- the toy's drafter setting: dflash_config.toy_gain, a number > 0, default 1 (read, checked and written here
// alone: DrafterConfig holds it as an opaque FamilySettings) ---
constexpr const char* kToyGainField = "dflash_config.toy_gain";
constexpr const char* kToyGainExpected = "a finite number > 0";

class ToySettings final : public drafter::FamilySettings {
 public:
  explicit ToySettings(double g) : gain(g) {}
  void validate(const DrafterConfig&, const std::string& where) const override {
    if (!(gain > 0) || !std::isfinite(gain))
      drafter::fail_field(where, kToyGainField, kToyGainExpected, nlohmann::json(gain).dump());
  }
  void write(const DrafterConfig&, nlohmann::json& j) const override { j["dflash_config"]["toy_gain"] = gain; }
  bool equals(const drafter::FamilySettings& other) const override {
    const auto* o = dynamic_cast<const ToySettings*>(&other);
    return o && o->gain == gain;
  }
  const double gain;
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
  const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }

  // --- the toy's drafter setting (above) ---
  drafter::FamilySettingKeys setting_keys() const override { return {{}, {"toy_gain"}}; }
  std::unique_ptr<drafter::FamilySettings> read_settings(const nlohmann::json&, const nlohmann::json& dc,
                                                         const std::string& where) const override {
    if (!dc.contains("toy_gain") || dc.at("toy_gain").is_null()) return nullptr;  // default_settings
    const nlohmann::json& v = dc.at("toy_gain");
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      drafter::fail_field(where, kToyGainField, kToyGainExpected, drafter::shown_field(v));  // as given
    return std::make_unique<ToySettings>(v.get<double>());
  }
  std::shared_ptr<const drafter::FamilySettings> default_settings(int64_t) const override {
    return std::make_shared<const ToySettings>(1.0);
  }

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

double toy_gain(const drafter::DrafterConfig& c) { return drafter::family_settings_as<ToySettings>(c, "Toy").gain; }

}  // namespace dflash::families::testing
