// DFlash2's train settings: read once into their types, validated (key, expectation, value), refused for another
// family, settled against a DFlash2 drafter_config, applied to the drafter built from the target, and kept on
// resume.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "dflash2_settings.h"  // DFlash2Settings: what the family's settings object is read as
#include "drafter_family_setting.h"
#include "drafter_spec.h"
#include "error_of.h"
#include "family_registry.h"
#include "scratch_dir.h"
#include "tiny_drafter_config.h"
#include "train_config.h"

using namespace dflash::train;

namespace {

TrainConfig with(const nlohmann::json& j) {
  TrainConfig c;
  c.target = "t";
  c.data = "d";
  c.out = "o";
  apply_json(c, j, "cfg.yaml");
  return c;
}

std::string validate_error(const TrainConfig& c) {
  return error_of<std::invalid_argument>([&] { c.validate(); });
}

// The files these tests write, in one folder removed at exit.
const dflash::testing::ScratchDir& scratch() {
  static const dflash::testing::ScratchDir d("dflash2_settings_");
  return d;
}

std::string dflash2_config_file(int64_t rank) {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"DFlash2DraftModel"};
  j["dflash_config"]["conv_kernel_size"] = 3;
  j["dflash_config"]["conv_group_size"] = 4;
  j["dflash_config"]["selector_rank"] = rank;
  j["dflash_config"]["selector_top_k"] = 5;
  const std::string path = scratch().file(std::to_string(rank) + ".json");
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace

TEST(DFlash2TrainSettings, ReadIntoTypesWithTheSourcesDefaults) {
  const TrainConfig d;
  EXPECT_EQ(d.family_setting("conv_kernel_size"), 2);  // the sources' K_conv, G, r, K
  EXPECT_EQ(d.family_setting("conv_group_size"), 16);
  EXPECT_EQ(d.family_setting("selector_rank"), 256);
  EXPECT_EQ(d.family_setting("selector_top_k"), 16);
  EXPECT_EQ(d.family_setting("selector_candidates"), "strict");
  EXPECT_EQ(d.family_setting("selector_stop_gradient"), false);
  EXPECT_EQ(d.family_setting("selector_loss_weight"), 1.0);
  const TrainConfig c = with({{"drafter_family", "dflash2"}, {"selector_candidates", "inject"},
                              {"selector_stop_gradient", true}, {"selector_loss_weight", 0.25}, {"selector_top_k", 8}});
  EXPECT_EQ(c.family_setting("selector_candidates"), "inject");
  EXPECT_EQ(c.family_setting("selector_stop_gradient"), true);
  EXPECT_EQ(c.family_setting("selector_loss_weight"), 0.25);
  EXPECT_EQ(c.family_setting("selector_top_k"), 8);
  EXPECT_EQ(validate_error(c), "");
  const nlohmann::json j = to_json(c);  // written in the canonical spelling, read back the same
  EXPECT_EQ(j["selector_candidates"], "inject");
  EXPECT_EQ(with(j).family_setting("selector_candidates"), "inject");
  EXPECT_EQ(error_of<std::invalid_argument>([] { with({{"selector_candidates", "gold"}}); }),
            "cfg.yaml: 'selector_candidates' must be inject or strict, got 'gold'");
}

TEST(DFlash2TrainSettings, RangesAndFamily) {
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"selector_loss_weight", -1.0}})),
            "train config: 'selector_loss_weight' must be a finite number in [0, 1000], got -1.0");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"selector_loss_weight", 1e300}})),
            "train config: 'selector_loss_weight' must be a finite number in [0, 1000], got 1e+300");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"conv_kernel_size", 0}})),
            "train config: 'conv_kernel_size': expected an integer in [1, 64], got 0");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"selector_top_k", 5000}})),
            "train config: 'selector_top_k': expected an integer in [1, 1024], got 5000");
  EXPECT_EQ(validate_error(with({{"selector_rank", 8}})),
            "train config: 'selector_rank' must be its default with drafter_family dflash (a DFlash2 setting: set "
            "drafter_family dflash2), got 8");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dspark"}, {"selector_candidates", "inject"}})),
            "train config: 'selector_candidates' must be its default with drafter_family dspark (a DFlash2 setting: "
            "set drafter_family dflash2), got 'inject'");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"draft_vocab", 100}})),
            "train config: 'draft_vocab' must be 0 with drafter_family dflash2 (the selector spans the full "
            "vocabulary: its codebooks and top-K index the target's vocabulary, and no source defines a draft "
            "vocabulary for it), got 100");
  EXPECT_NE(validate_error(with({{"selector_stop_gradient", true}})).find("'selector_stop_gradient' must be its default"),
            std::string::npos);
}

TEST(DFlash2TrainSettings, ADFlash2DrafterConfigSetsTheFamilyAndItsSettings) {
  const std::string file = dflash2_config_file(6);
  TrainConfig c = with({{"drafter_config", file}});
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dflash2", "test"));
  for (const auto& [key, v] : std::vector<std::pair<const char*, int64_t>>{
           {"conv_kernel_size", 3}, {"conv_group_size", 4}, {"selector_rank", 6}, {"selector_top_k", 5}})
    EXPECT_EQ(c.family_setting(key), v) << key;
  c = with({{"drafter_config", file}, {"selector_rank", 6}});  // given and equal: fine
  resolve_drafter_family(c, "train");
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              TrainConfig x = with({{"drafter_config", file}, {"selector_rank", 7}});
              resolve_drafter_family(x, "train");
            }),
            "train: 'selector_rank' is 7 (cfg.yaml) but 6 (drafter config " + file +
                "); give it once, or the same in both");
  // Without a drafter_config, the drafter built from the target takes the run's settings.
  TrainConfig t = with({{"drafter_family", "dflash2"}, {"selector_rank", 12}});
  dflash::drafter::DrafterConfig d;
  apply_family_settings(t, d);
  EXPECT_EQ(d.family, dflash::drafter::family_named("dflash2", "test"));
  EXPECT_EQ(dflash::drafter::family_settings_as<dflash::drafter::DFlash2Settings>(d, "DFlash2").selector_rank, 12);
}

TEST(DFlash2TrainSettings, AResumedRunKeepsThem) {
  const std::string dir = scratch().file("resume");
  ::mkdir(dir.c_str(), 0755);
  TrainConfig saved = with({{"drafter_family", "dflash2"}, {"selector_candidates", "inject"}, {"conv_group_size", 8},
                            {"selector_loss_weight", 0.1}, {"selector_stop_gradient", true}});
  saved.out = dir;
  std::ofstream(dir + "/train_config.json") << to_json(saved).dump();
  TrainArgs args;
  ASSERT_TRUE(read_train_args({"--resume", "--out", dir}, args));
  TrainConfig c = train_config_of(args);
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dflash2", "test"));
  EXPECT_EQ(c.family_setting("selector_candidates"), "inject");
  EXPECT_EQ(c.family_setting("conv_group_size"), 8);
  EXPECT_EQ(c.family_setting("selector_loss_weight"), 0.1);
  EXPECT_EQ(c.family_setting("selector_stop_gradient"), true);
}
