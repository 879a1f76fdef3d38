// The step's shape has one definition (drafter/run_shape.h): train's field table takes each shared setting's key,
// kind and help from it, TrainConfig its defaults and ranges, and the other commands' flags are declared from it with
// the same name, value, default and range; their old spellings are usage errors naming the new one.
#include <gtest/gtest.h>

#include <string>

#include "args.h"
#include "error_of.h"
#include "run_shape.h"
#include "train_config.h"

using namespace dflash;

namespace {

const train::FieldInfo* train_field(const std::string& key) {
  for (const train::FieldInfo& f : train::train_fields())
    if (f.key == key) return &f;
  return nullptr;
}

// A JSON value as train's flag and config file write it.
std::string text_of(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

TEST(RunShape, TrainDeclaresEverySharedSettingWithTheSameKeyKindHelpAndDefault) {
  const nlohmann::json train_defaults = train::to_json(train::TrainConfig{});
  const drafter::RunShape shape;
  ASSERT_EQ(drafter::run_shape_fields().size(), 7u);
  for (const drafter::RunShapeField& f : drafter::run_shape_fields()) {
    const train::FieldInfo* t = train_field(f.key);
    ASSERT_NE(t, nullptr) << f.key << " is no train setting";
    EXPECT_EQ(t->kind, f.kind) << f.key;
    EXPECT_EQ(t->help, f.help) << f.key;
    EXPECT_EQ(text_of(train_defaults.at(f.key)), drafter::run_shape_text(shape, f.key)) << f.key;
  }
  const drafter::RunShape from_train = train::TrainConfig{}.run_shape();
  for (const drafter::RunShapeField& f : drafter::run_shape_fields())
    EXPECT_EQ(drafter::run_shape_text(from_train, f.key), drafter::run_shape_text(shape, f.key)) << f.key;
  EXPECT_EQ(drafter::run_shape_text(shape, "kl_weight"), "0.0");  // plan and bench step used to default to 0.15
}

TEST(RunShape, OtherCommandsDeclareTheSameFlagDefaultAndRange) {
  util::Args a("plan", "test");
  std::vector<std::string> keys;
  for (const drafter::RunShapeField& f : drafter::run_shape_fields()) keys.push_back(f.key);
  drafter::declare_run_shape(a, keys);
  const std::string help = a.help();
  for (const drafter::RunShapeField& f : drafter::run_shape_fields()) {
    const std::string flag = "--" + drafter::run_shape_flag(f.key) + " " + f.value_name;
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from\n" << help;
    EXPECT_NE(help.find(f.help + " (default: " + drafter::run_shape_text(drafter::RunShape{}, f.key) + ")"),
              std::string::npos)
        << f.key;
  }
  ASSERT_TRUE(a.parse({"--max-len", "2048", "--num-anchors", "64", "--kl-weight", "0.15", "--dtype", "fp32",
                       "--activation-checkpoint", "every:2"}));
  const drafter::RunShape s = drafter::given_run_shape(a, keys, drafter::RunShape{});
  EXPECT_EQ(s.max_len, 2048);
  EXPECT_EQ(s.num_anchors, 64);
  EXPECT_EQ(s.kl_weight, 0.15);
  EXPECT_EQ(s.dtype, util::Dtype::F32);
  EXPECT_EQ(s.activation_checkpoint.every, 2);
  EXPECT_EQ(s.loss_chunk_rows, drafter::RunShape{}.loss_chunk_rows);  // not given: the base's
  // The ranges are train's (validate() reads the same table).
  util::Args b("plan", "test");
  drafter::declare_run_shape(b, keys);
  ASSERT_TRUE(b.parse({"--max-len", "1"}));
  EXPECT_EQ(error_of([&] { drafter::given_run_shape(b, keys, {}); }),
            "plan: --max-len must be an integer in [2, 1048576], got 1");
  train::TrainConfig c;
  c.target = "t", c.data = "d", c.out = "o", c.max_len = 1;
  EXPECT_EQ(error_of([&] { c.validate(); }), "train config: 'max_len' must be in [2, 1048576], got 1");
}

TEST(RunShape, OldSpellingsAreUsageErrorsNamingTheNewOne) {
  for (const auto& [old, now] : std::vector<std::pair<std::string, std::string>>{
           {"seq-len", "max-len"}, {"anchors", "num-anchors"}, {"loss-chunk", "loss-chunk-rows"},
           {"checkpoint", "activation-checkpoint"}}) {
    util::Args a("bench step", "test");
    drafter::declare_run_shape(a, {"max_len", "num_anchors", "loss_chunk_rows", "activation_checkpoint"});
    EXPECT_EQ(error_of<util::UsageError>([&] { a.parse({"--" + old, "8"}); }),
              "bench step: --" + old + " is now --" + now);
  }
  util::Args a("plan", "test");
  drafter::declare_run_shape(a, {"dtype"});
  ASSERT_TRUE(a.parse({"--dtype", "fp16"}));  // the drafter never computes in fp16 (train's rule)
  EXPECT_EQ(error_of<util::UsageError>([&] { drafter::given_run_shape(a, {"dtype"}, {}); }),
            "plan: --dtype must be bf16, fp32 or fp64, got 'fp16'");
}
