// A family's own train settings come from the family (drafter/family_train_settings.h), not from TrainConfig: the
// test-only toy family (tests/families/toy_family.cpp) declares `toy_gain`, and with no edit of TrainConfig or of any
// file of src/ it is a flag, a settings-file key (YAML and JSON), a key of the saved train_config.json read back on
// resume, checked by the toy's range, and refused with another family. A binary of its own: registering the toy
// changes what the other train tests see (the registered families in messages, the table of keys).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "family.h"
#include "family_registry.h"
#include "family_train_settings.h"
#include "toy_family.h"
#include "train_config.h"

using namespace dflash::train;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/dflash_family_settings_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> required(const std::string& out) {
  return {"--target", "t", "--data", "d", "--out", out};
}

TrainConfig from_flags(std::vector<std::string> argv) {
  for (const std::string& a : required("o")) argv.push_back(a);
  TrainConfig c;
  EXPECT_TRUE(parse_train_args(argv, c));
  return c;
}

std::string validate_error(const TrainConfig& c) {
  return error_of<std::invalid_argument>([&] { c.validate(); });
}

}  // namespace

TEST(FamilyTrainSettings, APluginFamilysSettingIsAFlagAndAKey) {
  dflash::families::testing::register_toy_family();
  const std::vector<FieldInfo> fields = train_fields();
  const auto it = std::find_if(fields.begin(), fields.end(), [](const FieldInfo& f) { return f.key == "toy_gain"; });
  ASSERT_NE(it, fields.end());
  EXPECT_EQ(it->kind, "int");
  EXPECT_EQ(TrainConfig{}.family_setting("toy_gain"), 1);  // the toy's default
  EXPECT_EQ(to_json(TrainConfig{})["toy_gain"], 1);

  const TrainConfig c = from_flags({"--drafter-family", "toy", "--toy-gain", "2"});
  EXPECT_EQ(c.family_setting("toy_gain"), 2);
  EXPECT_EQ(c.given_from.at("toy_gain"), "flag --toy-gain");
  EXPECT_EQ(validate_error(c), "");

  TrainConfig j;
  apply_config_text(j, R"({"drafter_family": "toy", "toy_gain": 2})", "t.json");
  EXPECT_EQ(j.family_setting("toy_gain"), 2);
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              TrainConfig x;
              apply_config_text(x, R"({"toy_gain": 1.5})", "t.json");
            }),
            "t.json: key 'toy_gain' expects an integer, got 1.5");
  if (have_yaml()) {
    TrainConfig y;
    apply_config_text(y, "drafter_family: toy\ntoy_gain: 2\n", "t.yaml");
    EXPECT_EQ(y.family_setting("toy_gain"), 2);
    EXPECT_EQ(y.given_from.at("toy_gain"), "t.yaml:2");
  }
}

TEST(FamilyTrainSettings, APluginFamilysSettingIsSavedAndReadBackOnResume) {
  dflash::families::testing::register_toy_family();
  const std::string dir = temp_path("resume");
  ::mkdir(dir.c_str(), 0755);
  std::vector<std::string> argv = {"--drafter-family", "toy", "--toy-gain", "2"};
  for (const std::string& a : required(dir)) argv.push_back(a);
  TrainConfig first;
  ASSERT_TRUE(parse_train_args(argv, first));
  const nlohmann::json saved = to_json(first);  // what the run writes as train_config.json
  EXPECT_EQ(saved["toy_gain"], 2);
  std::ofstream(dir + "/train_config.json") << saved.dump(2);
  TrainArgs args;
  ASSERT_TRUE(read_train_args({"--resume", "--out", dir}, args));
  const TrainConfig resumed = train_config_of(args);
  EXPECT_EQ(resumed.family_setting("toy_gain"), 2);
  EXPECT_STREQ(resumed.family().name(), "toy");
  EXPECT_EQ(validate_error(resumed), "");
  EXPECT_EQ(to_json(resumed)["toy_gain"], 2);
  // The flag given now overrides the saved value, as any setting's does.
  ASSERT_TRUE(read_train_args({"--resume", "--out", dir, "--toy-gain", "3"}, args));
  EXPECT_EQ(train_config_of(args).family_setting("toy_gain"), 3);
}

TEST(FamilyTrainSettings, APluginFamilysSettingIsCheckedByTheFamily) {
  dflash::families::testing::register_toy_family();
  EXPECT_EQ(validate_error(from_flags({"--drafter-family", "toy", "--toy-gain", "0"})),
            "train config: 'toy_gain' must be in [1, 16], got 0");
  // Given to another family it would be dropped unsaid: refused, naming the family it belongs to.
  EXPECT_EQ(validate_error(from_flags({"--drafter-family", "dflash", "--toy-gain", "2"})),
            "train config: 'toy_gain' must be its default with drafter_family dflash (a Toy setting: set "
            "drafter_family toy), got 2");
  EXPECT_EQ(validate_error(from_flags({"--toy-gain", "2"})),
            "train config: 'toy_gain' must be its default with drafter_family dflash (a Toy setting: set "
            "drafter_family toy), got 2");
  // ... and the toy refuses the built-ins' settings alike.
  EXPECT_EQ(validate_error(from_flags({"--drafter-family", "toy", "--markov-rank", "8"})),
            "train config: 'markov_rank' must be its default with drafter_family toy (a DSpark setting: set "
            "drafter_family dspark), got 8");
}

namespace {

// A family that declares one of DSpark's keys with another kind: one key, two meanings.
class ClashSettings final : public dflash::drafter::FamilyTrainSettings {
 public:
  std::vector<dflash::drafter::TrainSettingField> fields() const override {
    return {{"markov_rank", "float", 0.5, "clash: not DSpark's rank"}};
  }
};

class ClashFamily final : public dflash::drafter::Family {
 public:
  const char* name() const override { return "clash"; }
  const char* display_name() const override { return "Clash"; }
  const char* architecture() const override { return "ClashModel"; }
  const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }
  const dflash::drafter::FamilyTrainSettings& train_settings() const override {
    static const ClashSettings s;
    return s;
  }
};

}  // namespace

TEST(FamilyTrainSettings, AKeyTwoFamiliesDeclareDifferentlyIsRefusedAtRegistration) {
  static const ClashFamily clash;
  EXPECT_EQ(error_of<std::logic_error>([] { dflash::drafter::register_family(clash); }),
            "drafter family 'clash' declares the train setting 'markov_rank' as float 0.5, which 'dspark' declares as "
            "int 256 (one key, one meaning)");
  EXPECT_EQ(dflash::drafter::find_family("clash"), nullptr);
}
