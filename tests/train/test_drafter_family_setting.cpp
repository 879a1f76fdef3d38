// The run's drafter family: drafter_family and DSpark's settings read, validated (key, expectation, value) and
// settled against a drafter_config's architectures; a resumed run keeps the family it was started with.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "drafter_family_setting.h"
#include "error_of.h"
#include "family_registry.h"
#include "head_rank_default.h"
#include "sourced_spec.h"
#include "target_config.h"
#include "target_setup.h"
#include "tiny_drafter_config.h"
#include "train_config.h"

using namespace dflash::train;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/dflash_family_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

TrainConfig valid() {
  TrainConfig c;
  c.target = "t";
  c.data = "d";
  c.out = "o";
  return c;
}

TrainConfig with(const nlohmann::json& j) {
  TrainConfig c = valid();
  apply_json(c, j, "cfg.yaml");
  return c;
}

std::string validate_error(const TrainConfig& c) {
  return error_of<std::invalid_argument>([&] { c.validate(); });
}

std::string dspark_config_file(int64_t rank, const char* type) {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"Qwen3DSparkModel"};
  j["markov_rank"] = rank;
  j["markov_head_type"] = type;
  return write_file("dspark_" + std::to_string(rank) + type + ".json", j.dump());
}

}  // namespace

TEST(DrafterFamilySetting, DefaultsAreDeepSpecs) {
  const TrainConfig c;
  EXPECT_FALSE(c.drafter_family);
  EXPECT_EQ(c.family(), dflash::drafter::family_named("dflash", "test"));
  EXPECT_EQ(c.family_setting("markov_rank"), 256);
  EXPECT_EQ(c.family_setting("markov_head_type"), "vanilla");
  EXPECT_EQ(c.family_setting("enable_confidence_head"), true);
  EXPECT_EQ(c.family_setting("confidence_head_with_markov"), true);
  EXPECT_EQ(c.family_setting("ce_loss_weight"), 0.1);
  EXPECT_EQ(c.family_setting("l1_loss_weight"), 0.9);
  EXPECT_EQ(c.family_setting("confidence_loss_weight"), 1.0);
  EXPECT_EQ(validate_error(valid()), "");
}

TEST(DrafterFamilySetting, ReadFromFilesAndFlags) {
  EXPECT_EQ(with({{"drafter_family", "dspark"}}).family(), dflash::drafter::family_named("dspark", "test"));
  EXPECT_EQ(with({{"drafter_family", "dflash2"}}).family(), dflash::drafter::family_named("dflash2", "test"));
  EXPECT_FALSE(with({{"drafter_family", ""}}).drafter_family);
  EXPECT_EQ(error_of<std::invalid_argument>([] { with({{"drafter_family", "spark"}}); }),
            "cfg.yaml: 'drafter_family' must be dflash, dspark or dflash2 (empty: from drafter_config), got 'spark'");
  EXPECT_EQ(error_of<std::invalid_argument>([] { with({{"markov_head_type", "lstm"}}); }),
            "cfg.yaml: 'markov_head_type' must be vanilla, gated or rnn, got 'lstm'");
  TrainConfig c;
  ASSERT_TRUE(parse_train_args({"--drafter-family", "dspark", "--markov-rank", "8", "--markov-head-type", "rnn",
                                "--enable-confidence-head", "false", "--confidence-loss-weight", "0"},
                               c));
  EXPECT_EQ(c.family(), dflash::drafter::family_named("dspark", "test"));
  EXPECT_EQ(c.family_setting("markov_rank"), 8);
  EXPECT_EQ(c.family_setting("markov_head_type"), "rnn");
  EXPECT_EQ(c.family_setting("enable_confidence_head"), false);
  EXPECT_EQ(c.family_setting("confidence_head_with_markov"), true);
  EXPECT_NE(error_of<std::invalid_argument>([] {
              TrainConfig x;
              parse_train_args({"--enable-confidence-head", "no"}, x);
            }).find("train: --enable-confidence-head must be true or false, got 'no'"),
            std::string::npos);
}

TEST(DrafterFamilySetting, DSparkSettingsAreValidated) {
  const nlohmann::json dspark = {{"drafter_family", "dspark"}};
  auto err = [&](nlohmann::json j) {
    j.update(dspark);
    return validate_error(with(j));
  };
  EXPECT_EQ(err({}), "");
  EXPECT_EQ(err({{"markov_rank", 0}, {"enable_confidence_head", false}, {"ce_loss_weight", 1.0}, {"l1_loss_weight", 0.0},
                 {"confidence_loss_weight", 0.0}}),
            "");  // the DFlash baseline with next-token labels
  EXPECT_EQ(err({{"markov_rank", -3}}),
            "train config: 'markov_rank': expected an integer in [0, 65536] (0: no Markov bias), got -3");
  EXPECT_EQ(err({{"markov_rank", 0}, {"markov_head_type", "gated"}}),
            "train config: 'markov_head_type': expected vanilla when markov_rank is 0 (gated and rnn need a rank), got gated");
  EXPECT_EQ(err({{"l1_loss_weight", -0.5}}), "train config: 'l1_loss_weight' must be a finite number in [0, 1000], got -0.5");
  EXPECT_EQ(err({{"ce_loss_weight", 0.0}, {"l1_loss_weight", 0.0}, {"confidence_loss_weight", 0.0}}),
            "train config: 'ce_loss_weight' must be > 0 when l1_loss_weight and confidence_loss_weight are 0 (some loss "
            "to train on), got 0.0");
  EXPECT_EQ(err({{"enable_confidence_head", false}}),
            "train config: 'confidence_loss_weight' must be 0 with enable_confidence_head false (no head to train), got 1.0");
  EXPECT_EQ(err({{"kl_weight", 0.15}}),
            "train config: 'kl_weight' must be 0 with drafter_family dspark (its L1 to the target replaces soft labels), "
            "got 0.15");
}

TEST(DrafterFamilySetting, DSparkSettingsAreRefusedForOtherFamilies) {
  EXPECT_EQ(validate_error(with({{"markov_rank", 8}})),
            "train config: 'markov_rank' must be its default with drafter_family dflash (a DSpark setting: set "
            "drafter_family dspark), got 8");
  EXPECT_EQ(validate_error(with({{"drafter_family", "dflash2"}, {"l1_loss_weight", 0.5}})),
            "train config: 'l1_loss_weight' must be its default with drafter_family dflash2 (a DSpark setting: set "
            "drafter_family dspark), got 0.5");
}

TEST(DrafterFamilySetting, DrafterConfigArchitecturesSetTheFamily) {
  const std::string dflash = write_file("dflash.json", tiny_drafter_config_json().dump());
  const std::string dspark = dspark_config_file(8, "gated");
  TrainConfig c = valid();
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dflash", "test"));  // settled: the saved settings say it
  c = with({{"drafter_config", dspark}});
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dspark", "test"));
  EXPECT_EQ(c.family_setting("markov_rank"), 8);  // the file's heads
  EXPECT_EQ(c.family_setting("markov_head_type"), "gated");
  c = with({{"drafter_config", dspark}, {"drafter_family", "dspark"}, {"markov_rank", 8}});
  resolve_drafter_family(c, "train");  // agreeing settings are fine
  EXPECT_EQ(c.family_setting("markov_rank"), 8);
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              TrainConfig x = with({{"drafter_config", dspark}, {"drafter_family", "dspark"}, {"markov_rank", 16}});
              resolve_drafter_family(x, "train");
            }),
            "train: 'markov_rank' is 16 (cfg.yaml) but 8 (drafter config " + dspark +
                "); give it once, or the same in both");
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              TrainConfig x = with({{"drafter_config", dflash}, {"drafter_family", "dspark"}});
              resolve_drafter_family(x, "doctor --config");
            }),
            "doctor --config: 'drafter_family' is dspark (cfg.yaml) but dflash (drafter config " + dflash +
                "); give it once, or the same in both");
  c = with({{"drafter_config", dflash}});
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dflash", "test"));
}

TEST(DrafterFamilySetting, AResumedRunKeepsItsFamily) {
  const std::string dir = "/tmp/dflash_family_" + std::to_string(::getpid()) + "_resume";
  ::mkdir(dir.c_str(), 0755);
  TrainConfig saved = valid();
  saved.out = dir;
  saved.drafter_family = dflash::drafter::family_named("dspark", "test");
  saved.family_settings["markov_rank"] = 16;
  saved.family_settings["markov_head_type"] = "rnn";
  std::ofstream(dir + "/train_config.json") << to_json(saved).dump();
  TrainArgs args;
  ASSERT_TRUE(read_train_args({"--resume", "--out", dir}, args));
  TrainConfig c = train_config_of(args);
  resolve_drafter_family(c, "train");
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dspark", "test"));
  EXPECT_EQ(c.family_setting("markov_rank"), 16);
  EXPECT_EQ(c.family_setting("markov_head_type"), "rnn");
}

// Issue 51: markov_rank / selector_rank not given follow the hidden size, clamp(16 round(H / 256), 32, 256)
// (head_rank_default.h), so the published 8B / 27B shapes keep 256; a rank given, even 256, always wins, and a
// resumed run keeps the rank it saved (one from before the rule included).
namespace {

dflash::models::TargetConfig dense_target(int64_t hidden) {
  dflash::models::TargetConfig t;
  t.arch = dflash::models::TargetArch::qwen3;
  t.vocab_size = 512;
  t.hidden_size = hidden;
  t.intermediate_size = 3 * hidden;
  t.num_hidden_layers = 8;
  t.num_attention_heads = 8;
  t.num_key_value_heads = 2;
  t.head_dim = 64;
  t.rope.theta = 1e6;
  return t;
}

// The ranks (markov_rank, selector_rank) of the drafter train builds for a target of hidden size H with these
// settings, as the run saves them (shape_settings_of); -1: the drafter's family has no such rank.
std::pair<int64_t, int64_t> built_ranks(nlohmann::json settings, int64_t hidden) {
  settings["mask_token_id"] = 5;
  TrainConfig c = with(settings);
  resolve_drafter_family(c, "train");
  const nlohmann::json r = dflash::drafter::shape_settings_of(resolve_drafter_config(c, dense_target(hidden)));
  return {r.value("markov_rank", int64_t{-1}), r.value("selector_rank", int64_t{-1})};
}

}  // namespace

TEST(DrafterFamilySetting, HeadRanksFollowTheHiddenSizeUnlessGiven) {
  using dflash::drafter::default_head_rank;
  for (const auto& [h, r] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 32}, {16, 32}, {576, 32}, {640, 48}, {1024, 64}, {2048, 128}, {3840, 240}, {4096, 256}, {5120, 256},
           {16384, 256}})
    EXPECT_EQ(default_head_rank(h), r) << "H " << h;
  for (const int64_t h : {576, 1024, 4096, 5120}) {
    EXPECT_EQ(built_ranks({{"drafter_family", "dspark"}}, h).first, default_head_rank(h)) << h;
    EXPECT_EQ(built_ranks({{"drafter_family", "dflash2"}}, h).second, default_head_rank(h)) << h;
  }
  // Given wins, the old default's value too; another family's rank is not touched.
  EXPECT_EQ(built_ranks({{"drafter_family", "dspark"}, {"markov_rank", 256}}, 576).first, 256);
  EXPECT_EQ(built_ranks({{"drafter_family", "dspark"}, {"markov_rank", 8}}, 4096).first, 8);
  EXPECT_EQ(built_ranks({{"drafter_family", "dspark"}, {"markov_rank", 0}, {"enable_confidence_head", false},
                         {"confidence_loss_weight", 0.0}},
                        1024)
                .first,
            0);
  EXPECT_EQ(built_ranks({{"drafter_family", "dflash2"}, {"selector_rank", 256}}, 576).second, 256);
  EXPECT_EQ(built_ranks({{"drafter_family", "dflash2"}}, 576).first, -1);  // a drafter holds its family's settings only
  EXPECT_EQ(built_ranks({{"drafter_family", "dspark"}}, 576).second, -1);
}

TEST(DrafterFamilySetting, AResumedRunKeepsTheHeadRankItSaved) {
  const std::string dir = "/tmp/dflash_family_" + std::to_string(::getpid()) + "_resume_rank";
  ::mkdir(dir.c_str(), 0755);
  for (const int64_t saved_rank : {256, 32}) {  // 256: a small run saved before the rule
    TrainConfig saved = valid();
    saved.out = dir;
    saved.drafter_family = dflash::drafter::family_named("dspark", "test");
    saved.family_settings["markov_rank"] = saved_rank;
    saved.mask_token_id = 5;
    std::ofstream(dir + "/train_config.json") << to_json(saved).dump();
    TrainArgs args;
    ASSERT_TRUE(read_train_args({"--resume", "--out", dir}, args));
    TrainConfig c = train_config_of(args);
    resolve_drafter_family(c, "train");
    EXPECT_EQ(dflash::drafter::shape_settings_of(resolve_drafter_config(c, dense_target(576)))["markov_rank"], saved_rank);
  }
}
