// The drafter families as plug-ins (family.h, family_registry.h): the built-ins found by name and architecture,
// the registry's refusals, the built-ins' settings through their hooks, and a test-only toy family
// (toy_family.cpp) registered from here, whose setting keys the generic config reader then knows.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "drafter_config.h"
#include "error_of.h"
#include "family_registry.h"
#include "toy_family.h"

using namespace dflash::drafter;
using dflash::families::testing::register_toy_family;
using dflash::families::testing::toy_family;
using dflash::families::testing::toy_gain;

namespace {

// A FamilySettings type no family uses: family_settings_as refuses it.
struct ToyDFlashGainProbe final : FamilySettings {
  void validate(const DrafterConfig&, const std::string&) const override {}
  void write(const DrafterConfig&, nlohmann::json&) const override {}
  bool equals(const FamilySettings&) const override { return false; }
};

// A valid DFlash drafter config.json (two layers, vocabulary 32).
nlohmann::json tiny_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4,
    "num_target_layers": 8, "num_hidden_layers": 2,
    "dflash_config": {"mask_token_id": 31, "target_layer_ids": [1, 5]},
    "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "vocab_size": 32})");
}

TEST(Families, BuiltinsAreFoundByNameAndByArchitecture) {
  for (const char* name : {"dflash", "dspark", "dflash2"}) {
    const Family* by_name = find_family(name);
    ASSERT_NE(by_name, nullptr) << name;
    EXPECT_EQ(by_name, find_family_of_architecture(by_name->architecture()));
    EXPECT_EQ(by_name, &family_of(FamilyRef(*by_name)));
  }
  EXPECT_EQ(&default_family(), find_family("dflash"));  // the first registered: a DrafterConfig's by default
  EXPECT_STREQ(find_family("dspark")->architecture(), "Qwen3DSparkModel");
  EXPECT_EQ(find_family("DSpark"), nullptr);
  EXPECT_EQ(find_family_of_architecture("DSparkDraftModel"), nullptr);
}

TEST(Families, AnUnknownNameListsTheRegisteredOnes) {
  register_toy_family();
  EXPECT_EQ(error_of<std::invalid_argument>([] { family_named("spark", "plan: --drafter-family"); }),
            "plan: --drafter-family must be dflash, dspark, dflash2 or toy, got 'spark'");
  EXPECT_EQ(&family_named("toy", "x"), &toy_family());
}

TEST(Families, ANameOrArchitectureIsRegisteredOnce) {
  class Impostor final : public Family {
   public:
    const char* name() const override { return "dflash3"; }
    const char* display_name() const override { return "DFlash3"; }
    const char* architecture() const override { return "Qwen3DSparkModel"; }
    const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }
  };
  static const Impostor impostor;
  EXPECT_EQ(error_of<std::logic_error>([] { register_family(impostor); }),
            "drafter family 'dflash3' (architectures [\"Qwen3DSparkModel\"]) is registered already as 'dspark' "
            "([\"Qwen3DSparkModel\"])");
  EXPECT_EQ(find_family("dflash3"), nullptr);
  const size_t n = registered_families().size();
  register_family(*find_family("dspark"));  // the same object again: nothing added
  EXPECT_EQ(registered_families().size(), n);
}

TEST(Families, BuiltinSettingsGoThroughTheirHooks) {
  nlohmann::json j = tiny_config();
  j["architectures"] = {"DFlash2DraftModel"};
  j["dflash_config"].update({{"conv_kernel_size", 2}, {"conv_group_size", 4}, {"selector_rank", 4}, {"selector_top_k", 4}});
  const DrafterConfig c = parse_drafter_config(j, "d2.json");
  ASSERT_TRUE(c.family_settings);
  nlohmann::json written = nlohmann::json::object();
  c.family_settings->write(c, written);
  EXPECT_EQ(written["dflash_config"]["conv_group_size"], 4);
  EXPECT_EQ(written["dflash_config"]["selector_rank"], 4);
  EXPECT_EQ(written["is_causal"], false);
  EXPECT_EQ(drafter_config_to_json(c)["dflash_config"]["selector_top_k"], 4);
  EXPECT_EQ(parse_drafter_config(tiny_config(), "d.json").family_settings, nullptr);  // DFlash has none
  EXPECT_EQ(find_family("dflash")->default_settings(16), nullptr);
  EXPECT_EQ(find_family("dspark")->remote_code_files(), (std::vector<const char*>{"dflash.py", "dspark.py"}));
  EXPECT_STREQ(find_family("dflash")->draft_vocab_refusal(), "");
}

// A config holds its family's settings object: copies share it, equality is by value, and a config without them
// (or with another family's) is a programming error that names the family.
TEST(Families, AConfigHoldsItsFamilysSettingsObject) {
  nlohmann::json j = tiny_config();
  j["architectures"] = {"DFlash2DraftModel"};
  j["dflash_config"].update({{"conv_kernel_size", 2}, {"conv_group_size", 4}, {"selector_rank", 4}, {"selector_top_k", 4}});
  const DrafterConfig c = parse_drafter_config(j, "d2.json");
  const DrafterConfig copy = c;
  EXPECT_EQ(copy.family_settings, c.family_settings);  // shared, immutable
  EXPECT_TRUE(same_family_settings(copy, c));
  DrafterConfig other = c;
  other.family_settings = find_family("dflash2")->default_settings(c.hidden_size);
  EXPECT_FALSE(same_family_settings(other, c));  // rank and top-K differ from the defaults
  EXPECT_EQ(error_of<std::logic_error>([&] { family_settings_as<ToyDFlashGainProbe>(c, "Toy"); }),
            "a drafter config of family 'dflash2' holds another family's settings where Toy's were expected (set "
            "DrafterConfig::family_settings: the family's read_settings or default_settings)");
  DrafterConfig bare = c;
  bare.family_settings = nullptr;
  EXPECT_EQ(error_of<std::logic_error>([&] { bare.validate("d2.json"); }),
            "d2.json: a drafter config of family 'dflash2' holds no family settings (set "
            "DrafterConfig::family_settings from the family's read_settings or default_settings)");
  DrafterConfig switched = c;
  switched.family = *find_family("dspark");
  EXPECT_EQ(error_of<std::logic_error>([&] { switched.validate("x"); }),
            "x: a drafter config of family 'dspark' holds another family's settings (set "
            "DrafterConfig::family_settings from the family's read_settings or default_settings)");
  switched.family = *find_family("dflash");
  EXPECT_EQ(error_of<std::logic_error>([&] { switched.validate("x"); }),
            "x: a drafter config of family 'dflash' holds settings the family does not have (set "
            "DrafterConfig::family_settings from the family's read_settings or default_settings)");
}

// The toy's own setting (toy_family.cpp): read from config.json, validated, written back and read again, all by the
// toy's code, with no edit of DrafterConfig or any file outside tests/.
TEST(Families, ToySettingRoundTripsThroughParseAndSave) {
  register_toy_family();
  nlohmann::json j = tiny_config();
  j["architectures"] = {"ToyDFlashModel"};
  j["dflash_config"]["toy_gain"] = 2.5;
  const DrafterConfig c = parse_drafter_config(j, "c.json");
  EXPECT_EQ(&family_of(c.family), &toy_family());
  EXPECT_EQ(toy_gain(c), 2.5);
  const nlohmann::json out = drafter_config_to_json(c);
  EXPECT_EQ(out["architectures"], nlohmann::json({"ToyDFlashModel"}));
  EXPECT_EQ(out["dflash_config"]["toy_gain"], 2.5);
  const std::string path = ::testing::TempDir() + "toy_config_" + std::to_string(::getpid()) + ".json";
  save_drafter_config(path, c);
  const DrafterConfig back = load_drafter_config(path);
  std::remove(path.c_str());
  EXPECT_EQ(&family_of(back.family), &toy_family());
  EXPECT_EQ(toy_gain(back), 2.5);
  EXPECT_TRUE(same_family_settings(back, c));

  // None of its keys: the toy's default (default_settings), written back explicitly.
  j["dflash_config"].erase("toy_gain");
  const DrafterConfig plain = parse_drafter_config(j, "c.json");
  EXPECT_EQ(toy_gain(plain), 1.0);
  EXPECT_EQ(drafter_config_to_json(plain)["dflash_config"]["toy_gain"], 1.0);
  EXPECT_FALSE(same_family_settings(plain, c));
}

TEST(Families, ABadToySettingNamesTheFileAndTheField) {
  register_toy_family();
  nlohmann::json j = tiny_config();
  j["architectures"] = {"ToyDFlashModel"};
  for (const auto& [bad, shown] : std::vector<std::pair<nlohmann::json, std::string>>{
           {0, "0"}, {-1.5, "-1.5"}, {"2", "\"2\""}, {true, "true"}, {nlohmann::json::array({1}), "[1]"}}) {
    j["dflash_config"]["toy_gain"] = bad;
    EXPECT_EQ(error_of<std::invalid_argument>([&] { parse_drafter_config(j, "c.json"); }),
              "c.json: field 'dflash_config.toy_gain': expected a finite number > 0, got " + shown);
  }
  // From a file: the error names the file.
  j["dflash_config"]["toy_gain"] = -2;
  const std::string path = ::testing::TempDir() + "toy_bad_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << j.dump();
  EXPECT_EQ(error_of<std::invalid_argument>([&] { load_drafter_config(path); }),
            path + ": field 'dflash_config.toy_gain': expected a finite number > 0, got -2");
  std::remove(path.c_str());
}

TEST(Families, TheConfigReaderRefusesTheToysKeysInAnotherFamilysConfig) {
  register_toy_family();
  nlohmann::json j = tiny_config();
  j["dflash_config"]["toy_gain"] = 3;
  EXPECT_EQ(error_of<std::invalid_argument>([&] { parse_drafter_config(j, "c.json"); }),
            "c.json: field 'dflash_config.toy_gain': expected absent for architectures [\"DFlashDraftModel\"] (a Toy "
            "drafter says [\"ToyDFlashModel\"]), got 3");
  j["dflash_config"].erase("toy_gain");
  j["architectures"] = {"NoSuchModel"};
  EXPECT_EQ(error_of<std::invalid_argument>([&] { parse_drafter_config(j, "c.json"); }),
            "c.json: field 'architectures': expected [\"DFlashDraftModel\"], [\"Qwen3DSparkModel\"], "
            "[\"DFlash2DraftModel\"] or [\"ToyDFlashModel\"], got [\"NoSuchModel\"]");
}

TEST(Families, APluginFamilysConfigRefusesADraftVocabularyItHasNot) {
  register_toy_family();
  nlohmann::json j = tiny_config();
  j["architectures"] = {"ToyDFlashModel"};
  j["draft_vocab_size"] = 8;
  EXPECT_EQ(error_of<std::invalid_argument>([&] { parse_drafter_config(j, "c.json"); }),
            "c.json: field 'draft_vocab_size': expected absent with architectures [\"ToyDFlashModel\"] (the toy family "
            "has no draft vocabulary), got 8");
}

}  // namespace
