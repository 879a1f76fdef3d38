// The drafter spec (drafter_spec.h): the train config's given settings and a drafter config's meet under one rule,
// a field given twice with different values is an error naming both sources and values, a field given once is
// taken. The case it was built for: `block_size: 16` (the default) in a train config beside a drafter config
// saying 8 used to train with 8 without a word.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "drafter_family_setting.h"
#include "drafter_spec.h"
#include "error_of.h"
#include "family_registry.h"
#include "scratch_dir.h"
#include "tiny_drafter_config.h"
#include "train_config.h"

using namespace dflash::train;

namespace {

// The files these tests write, in one folder removed at exit.
const dflash::testing::ScratchDir& scratch() {
  static const dflash::testing::ScratchDir d("dflash_spec_");
  return d;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = scratch().file(name);
  std::ofstream(path) << text;
  return path;
}

// A drafter config: the tiny one (2 layers, target layers [1, 5]) with block size 8.
std::string drafter_file(const std::string& name, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = tiny_drafter_config_json();
  j["block_size"] = 8;
  j.update(extra);
  return write_file(name, j.dump());
}

// `dflash train --config <train settings> <flags> --drafter-config <drafter>`, resolved as train resolves it.
TrainConfig resolved(const nlohmann::json& settings, const std::vector<std::string>& flags, const std::string& drafter) {
  TrainArgs args;
  std::vector<std::string> argv = {"--target", "t", "--data", "d", "--out", "o", "--drafter-config", drafter};
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (!settings.is_null()) {
    argv.push_back("--config");
    argv.push_back(write_file("train.json", settings.dump()));
  }
  EXPECT_TRUE(read_train_args(argv, args));
  TrainConfig c = train_config_of(args);
  resolve_drafter_family(c, "train");
  return c;
}

std::string resolve_error(const nlohmann::json& settings, const std::vector<std::string>& flags,
                          const std::string& drafter) {
  return error_of<std::invalid_argument>([&] { resolved(settings, flags, drafter); });
}

}  // namespace

TEST(DrafterSpec, ADefaultValueGivenInATrainConfigConflictsWithTheDrafterConfig) {
  const std::string drafter = drafter_file("b8.json");
  const std::string settings = scratch().file("train.json");
  EXPECT_EQ(resolve_error({{"block_size", 16}}, {}, drafter),
            "train: 'block_size' is 16 (train config " + settings + ") but 8 (drafter config " + drafter +
                "); give it once, or the same in both");
  EXPECT_EQ(resolve_error(nlohmann::json(), {"--block-size", "16"}, drafter),
            "train: 'block_size' is 16 (flag --block-size) but 8 (drafter config " + drafter +
                "); give it once, or the same in both");
  EXPECT_EQ(resolve_error({{"target_layer_ids", "1,4"}}, {}, drafter),
            "train: 'target_layer_ids' is [1,4] (train config " + settings + ") but [1,5] (drafter config " +
                drafter + "); give it once, or the same in both");
}

TEST(DrafterSpec, EqualValuesAreFine) {
  const std::string drafter = drafter_file("b8_equal.json");
  TrainConfig c = resolved({{"block_size", 8}, {"drafter_layers", 2}}, {"--target-layer-ids", "1,5"}, drafter);
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.drafter_layers, 2);
  // The flags override the --config file before the rule runs (one invocation's own precedence).
  c = resolved({{"block_size", 16}}, {"--block-size", "8"}, drafter);
  EXPECT_EQ(c.block_size, 8);
}

TEST(DrafterSpec, AFieldGivenOnceIsTaken) {
  const std::string drafter = drafter_file("b8_once.json");
  const TrainConfig c = resolved(nlohmann::json::object(), {}, drafter);
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.drafter_layers, 2);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(c.drafter_family, dflash::drafter::family_named("dflash", "test"));
  EXPECT_EQ(c.given_from.at("block_size"), "drafter config " + drafter);
  // Without a drafter config, the train config's value is the run's.
  TrainConfig t;
  apply_json(t, {{"block_size", 4}}, "t.json");
  const DrafterSpec s = spec_of_train_config(t);
  ASSERT_TRUE(s.block_size);
  EXPECT_EQ(s.block_size->value, 4);
  EXPECT_EQ(s.block_size->source, "t.json");
  EXPECT_FALSE(s.drafter_layers);  // not given: no value, whatever its default
}

TEST(DrafterSpec, AFamilySettingInConflictIsAnError) {
  const std::string dspark = drafter_file("dspark.json", {{"architectures", {"Qwen3DSparkModel"}},
                                                          {"markov_rank", 8},
                                                          {"markov_head_type", "gated"}});
  EXPECT_EQ(resolve_error(nlohmann::json(), {"--markov-rank", "256"}, dspark),
            "train: 'markov_rank' is 256 (flag --markov-rank) but 8 (drafter config " + dspark +
                "); give it once, or the same in both");
  EXPECT_EQ(resolve_error({{"markov_head_type", "rnn"}}, {}, dspark).substr(0, 46),
            "train: 'markov_head_type' is rnn (train config");
  const TrainConfig c = resolved({{"markov_rank", 8}}, {}, dspark);  // equal: fine; the rest is the file's
  EXPECT_EQ(c.family(), dflash::drafter::family_named("dspark", "test"));
  EXPECT_EQ(c.family_setting("markov_rank"), 8);
  EXPECT_EQ(c.family_setting("markov_head_type"), "gated");

  nlohmann::json dc = tiny_drafter_config_json()["dflash_config"];
  dc.update({{"conv_kernel_size", 3}, {"conv_group_size", 4}, {"selector_rank", 6}, {"selector_top_k", 5}});
  const std::string dflash2 = drafter_file("dflash2.json", {{"architectures", {"DFlash2DraftModel"}}, {"dflash_config", dc}});
  EXPECT_EQ(resolve_error(nlohmann::json(), {"--selector-top-k", "4"}, dflash2),
            "train: 'selector_top_k' is 4 (flag --selector-top-k) but 5 (drafter config " + dflash2 +
                "); give it once, or the same in both");
  EXPECT_EQ(resolved(nlohmann::json(), {}, dflash2).family_setting("selector_rank"), 6);
}

TEST(DrafterSpec, TheRuleOnTwoSpecs) {
  DrafterSpec a, b;
  a.block_size = Sourced<int64_t>{16, "preset x"};
  b.drafter_layers = Sourced<int64_t>{3, "drafter config d.json"};
  const DrafterSpec m = merge_specs(a, b, "plan");
  EXPECT_EQ(m.block_size->value, 16);
  EXPECT_EQ(m.drafter_layers->value, 3);
  b.block_size = Sourced<int64_t>{4, "drafter config d.json"};
  EXPECT_EQ(error_of<std::invalid_argument>([&] { merge_specs(a, b, "plan"); }),
            "plan: 'block_size' is 16 (preset x) but 4 (drafter config d.json); give it once, or the same in both");
  a.extras["selector_rank"] = {nlohmann::json(6), "flag --selector-rank"};
  b.extras["selector_rank"] = {nlohmann::json(6), "drafter config d.json"};
  b.block_size.reset();
  EXPECT_EQ(merge_specs(a, b, "plan").extras.at("selector_rank").source, "flag --selector-rank");  // equal: the first
}

// mask_token_id is one row of the table too: a train config's that differs from the drafter config's is an error
// naming both sources (it used to replace the file's silently); equal or not given, the file's is taken.
TEST(DrafterSpec, AMaskTokenInConflictIsAnError) {
  const std::string drafter = drafter_file("mask.json");  // dflash_config.mask_token_id 31
  const std::string settings = scratch().file("train.json");
  EXPECT_EQ(resolve_error({{"mask_token_id", 7}}, {}, drafter),
            "train: 'mask_token_id' is 7 (train config " + settings + ") but 31 (drafter config " + drafter +
                "); give it once, or the same in both");
  EXPECT_EQ(resolve_error(nlohmann::json(), {"--mask-token-id", "30"}, drafter),
            "train: 'mask_token_id' is 30 (flag --mask-token-id) but 31 (drafter config " + drafter +
                "); give it once, or the same in both");
  EXPECT_EQ(resolved({{"mask_token_id", 31}}, {}, drafter).mask_token_id, 31);
  const TrainConfig c = resolved(nlohmann::json::object(), {}, drafter);
  EXPECT_EQ(c.mask_token_id, 31);
  EXPECT_EQ(c.given_from.at("mask_token_id"), "drafter config " + drafter);
}

// The spec's one table (drafter/sourced_spec.h): every field's key and none value, which the drafter config's side
// and the train config's side both take; an unknown field is a logic error, not a silent default.
TEST(DrafterSpec, OneTableOfKeysAndNoneValues) {
  using dflash::drafter::spec_row;
  EXPECT_EQ(dflash::drafter::spec_row_count(), 6u);
  EXPECT_STREQ(spec_row(&DrafterSpec::family).key, "drafter_family");
  EXPECT_STREQ(spec_row(&DrafterSpec::drafter_layers).key, "drafter_layers");
  EXPECT_STREQ(spec_row(&DrafterSpec::block_size).key, "block_size");
  EXPECT_FALSE(spec_row(&DrafterSpec::block_size).none);
  EXPECT_EQ(spec_row(&DrafterSpec::target_layer_ids).none, std::vector<int64_t>{});
  EXPECT_EQ(spec_row(&DrafterSpec::draft_vocab).none, int64_t{0});
  EXPECT_EQ(spec_row(&DrafterSpec::mask_token_id).none, int64_t{-1});
  // Both sides read a field's key from the table: a drafter config's none is no value, a train config's given key is.
  dflash::drafter::DrafterConfig d;
  d.block_size = 8;
  const DrafterSpec from_file = dflash::drafter::spec_of_drafter(d, "f");
  EXPECT_FALSE(from_file.draft_vocab);
  EXPECT_FALSE(from_file.mask_token_id);
  EXPECT_FALSE(from_file.target_layer_ids);
  ASSERT_TRUE(from_file.block_size);
  EXPECT_EQ(from_file.block_size->value, 8);
}

// A key the train config gives counts whatever its value, draft_vocab 0 (the full vocabulary) too: beside a drafter
// config's draft vocabulary it is an error naming both (the file's K used to win without a word), as block_size 16.
TEST(DrafterSpec, AnExplicitFullVocabularyConflictsWithADrafterConfigsDraftVocabulary) {
  const std::string drafter = drafter_file("vocab8.json", {{"draft_vocab_size", 8}});
  EXPECT_EQ(resolve_error(nlohmann::json(), {"--draft-vocab", "0"}, drafter),
            "train: 'draft_vocab' is 0 (flag --draft-vocab) but 8 (drafter config " + drafter +
                "); give it once, or the same in both");
  EXPECT_EQ(resolve_error({{"draft_vocab", 0}}, {}, drafter),
            "train: 'draft_vocab' is 0 (train config " + scratch().file("train.json") + ") but 8 (drafter config " +
                drafter + "); give it once, or the same in both");
  EXPECT_EQ(resolved(nlohmann::json(), {"--draft-vocab", "8"}, drafter).draft_vocab, 8);  // equal: fine
  const TrainConfig c = resolved(nlohmann::json(), {}, drafter);                           // not given: the file's
  EXPECT_EQ(c.draft_vocab, 8);
  // A drafter config without a draft vocabulary gives none: the train config's is taken, 0 or K.
  const std::string full = drafter_file("full.json");
  EXPECT_EQ(resolved(nlohmann::json(), {"--draft-vocab", "0"}, full).draft_vocab, 0);
  EXPECT_EQ(resolved(nlohmann::json(), {"--draft-vocab", "8"}, full).draft_vocab, 8);
}
