// The training loop's family hooks (drafter/family_training.h): a family without hooks (the toy) trains as DFlash,
// DSpark's and DFlash2's read their objective's settings by train's keys (a missing or mistyped key is named), build
// their own blocks, and turn summed metric terms into the metrics.jsonl keys and progress text a run logs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "block_batch.h"
#include "dflash2_drafter_settings.h"
#include "dspark_block_batch.h"
#include "dspark_drafter_settings.h"
#include "dspark_loss.h"
#include "error_of.h"
#include "family_cost.h"
#include "family_registry.h"
#include "family_training.h"
#include "toy_family.h"

using namespace dflash::drafter;
using dflash::families::testing::register_toy_family;
using dflash::families::testing::toy_family;

namespace {

// A run's settings as train_config.json writes them (the keys the families read).
nlohmann::json run_settings() {
  return {{"loss_chunk_rows", 256},       {"ce_loss_weight", 0.25},        {"l1_loss_weight", 0.5},
          {"confidence_loss_weight", 2.0}, {"selector_loss_weight", 0.75}, {"selector_candidates", "inject"},
          {"selector_stop_gradient", true}};
}

DrafterConfig config_of(const dflash::drafter::Family& f) {
  DrafterConfig d;
  d.family = f;
  d.block_size = 4;
  d.mask_token_id = 63;
  d.family_settings = f.default_settings(d.hidden_size);
  if (&f == find_family("dflash2")) {
    DFlash2Settings s = dflash::families::dflash2_settings(d);
    s.selector_top_k = 5;
    d.family_settings = std::make_shared<const dflash::families::DFlash2DrafterSettings>(s);
  }
  return d;
}

// Two sequences of 10 tokens, prompt 2, and 3 anchors each.
struct Batch {
  at::Tensor ids, mask;
  AnchorSample anchors;
};
Batch batch() {
  at::manual_seed(3);
  Batch b;
  b.ids = at::randint(3, 60, {2, 10}, at::kLong);
  b.mask = (at::arange(10) >= 2).unsqueeze(0).expand({2, 10}).contiguous();
  std::mt19937_64 rng(7);
  b.anchors = sample_anchors(b.mask, 3, rng);
  return b;
}

void expect_same_blocks(const BlockBatch& a, const BlockBatch& b) {
  EXPECT_TRUE(at::equal(a.block_ids, b.block_ids));
  EXPECT_TRUE(at::equal(a.labels, b.labels));
  EXPECT_TRUE(at::equal(a.weights, b.weights));
  EXPECT_TRUE(at::equal(a.teacher_index, b.teacher_index));
}

TEST(FamilyTraining, AFamilyWithoutHooksTrainsAsDFlash) {
  register_toy_family();
  const FamilyTraining& toy = family_training(toy_family());
  EXPECT_EQ(&toy, &family_training(dflash::drafter::family_named("dflash", "test")));
  EXPECT_EQ(toy.unset_gamma(), 0.0);
  EXPECT_FALSE(toy_family().cost().needs_last_hidden(config_of(dflash::drafter::family_named("dflash", "test"))));
  EXPECT_TRUE(toy.loss_setting_keys().empty());
  const DrafterConfig d = config_of(dflash::drafter::family_named("dflash", "test"));
  EXPECT_EQ(toy.metric_sums_size(d), 0);
  DrafterLossOptions o;
  toy.add_loss_options(nlohmann::json::object(), d, o);  // reads nothing: an empty settings object will do
  EXPECT_EQ(toy.step_denominator_eps(o), 0.0);
  const Batch b = batch();
  expect_same_blocks(toy.build_blocks(d, b.ids, b.mask, b.anchors, 7.0),
                     build_block_batch(b.ids, b.mask, b.anchors, 4, 63, 7.0));
}

TEST(FamilyTraining, DSparkTakesItsObjectiveBlocksAndTeacher) {
  const FamilyTraining& t = family_training(dflash::drafter::family_named("dspark", "test"));
  const DrafterConfig d = config_of(dflash::drafter::family_named("dspark", "test"));
  DrafterLossOptions o;
  t.add_loss_options(run_settings(), d, o);
  EXPECT_EQ(o.dspark.chunk_rows, 256);
  EXPECT_EQ(o.dspark.ce_weight, 0.25);
  EXPECT_EQ(o.dspark.l1_weight, 0.5);
  EXPECT_EQ(o.dspark.confidence_weight, 2.0);
  EXPECT_EQ(t.unset_gamma(), 4.0);  // DeepSpec's
  EXPECT_EQ(t.step_denominator_eps(o), o.dspark.den_eps);
  EXPECT_GT(o.dspark.den_eps, 0.0);
  t.use_generic_loss_kernels(o);
  EXPECT_FALSE(o.dspark.fused);
  EXPECT_TRUE(family_cost(config_of(dflash::drafter::family_named("dspark", "test"))).needs_last_hidden(config_of(dflash::drafter::family_named("dspark", "test"))));
  EXPECT_STREQ(family_cost(config_of(dflash::drafter::family_named("dspark", "test"))).teacher_label(), "its L1 teacher");
  EXPECT_EQ(t.loss_setting_keys(), (std::vector<std::string>{"ce_loss_weight", "l1_loss_weight", "confidence_loss_weight"}));
  const Batch b = batch();
  expect_same_blocks(t.build_blocks(d, b.ids, b.mask, b.anchors, 4.0),
                     build_dspark_block_batch(b.ids, b.mask, b.anchors, 4, 63, 4.0));
  EXPECT_FALSE(at::equal(t.build_blocks(d, b.ids, b.mask, b.anchors, 4.0).labels,
                         build_block_batch(b.ids, b.mask, b.anchors, 4, 63, 4.0).labels));  // next-token labels
}

TEST(FamilyTraining, DSparkNamesDeepSpecsMetricsAndShowsL1AndTau) {
  const FamilyTraining& t = family_training(dflash::drafter::family_named("dspark", "test"));
  DrafterConfig d = config_of(dflash::drafter::family_named("dspark", "test"));
  DSparkHeads heads = dflash::families::dspark_settings(d);
  heads.enable_confidence_head = false;
  d.family_settings = std::make_shared<const dflash::families::DSparkDrafterSettings>(heads);
  ASSERT_EQ(t.metric_sums_size(d), dspark_stats_size(4));
  at::Tensor sums = at::zeros({t.metric_sums_size(d)}, at::kDouble);
  sums[kStatL1] = 3.0;
  sums[kStatDen] = 4.0;
  sums[kStatTau] = 5.0;
  sums[kStatBlocks] = 2.0;
  for (int64_t j = 0; j < 4; ++j) sums[kStatSlots + 4 + j] = 2.0;  // every slot counted (no NaN)
  const FamilyStepMetrics m = t.step_metrics(d, sums);
  EXPECT_EQ(m.named, dspark_metrics(sums, 4, false));
  EXPECT_EQ(m.named.size(), 4u + 4u);  // three losses, tau, accept_rate@0..3
  EXPECT_EQ(m.progress, "  l1 0.750  tau 2.500");
}

TEST(FamilyTraining, DFlash2TakesItsSelectorSettings) {
  const FamilyTraining& t = family_training(dflash::drafter::family_named("dflash2", "test"));
  const DrafterConfig d = config_of(dflash::drafter::family_named("dflash2", "test"));
  DrafterLossOptions o;
  t.add_loss_options(run_settings(), d, o);
  EXPECT_EQ(o.dflash2.selector_weight, 0.75);
  EXPECT_EQ(o.dflash2.selector.top_k, 5);  // the drafter's K
  EXPECT_EQ(o.dflash2.selector.candidates, SelectorCandidates::Inject);
  EXPECT_TRUE(o.dflash2.selector.stop_gradient);
  EXPECT_EQ(t.unset_gamma(), 0.0);
  EXPECT_FALSE(family_cost(config_of(dflash::drafter::family_named("dflash2", "test"))).needs_last_hidden(config_of(dflash::drafter::family_named("dflash2", "test"))));
  EXPECT_EQ(t.loss_setting_keys(), std::vector<std::string>{"selector_loss_weight"});

  nlohmann::json s = run_settings();
  s.erase("selector_loss_weight");
  EXPECT_EQ(error_of<std::logic_error>([&] { t.add_loss_options(s, d, o); }),
            "train settings: the drafter family reads 'selector_loss_weight' as a number, which the run's settings "
            "lack");
  s = run_settings();
  s["selector_stop_gradient"] = "yes";
  EXPECT_EQ(error_of<std::logic_error>([&] { t.add_loss_options(s, d, o); }),
            "train settings: the drafter family reads 'selector_stop_gradient' as a boolean, which the run's settings "
            "hold as \"yes\"");
}

// The sums add over micro-batches, workers and processes; the metrics are ratios of the step's totals.
TEST(FamilyTraining, DFlash2MetricsAreRatiosOfTheStepsSums) {
  const FamilyTraining& t = family_training(dflash::drafter::family_named("dflash2", "test"));
  const DrafterConfig d = config_of(dflash::drafter::family_named("dflash2", "test"));
  ASSERT_EQ(t.metric_sums_size(d), 9);
  // ce_sum, weight, rows, recall_hits, selector_hits, blocks, path, oracle and unary length sums
  const at::Tensor a = at::tensor({1.0, 3.0, 6.0, 3.0, 1.0, 1.0, 1.0, 2.0, 1.5}, at::kDouble);
  const at::Tensor b = at::tensor({1.0, 1.0, 4.0, 2.0, 1.0, 1.0, 2.0, 3.0, 2.5}, at::kDouble);
  const FamilyStepMetrics m = t.step_metrics(d, a + b);
  const std::vector<std::pair<std::string, double>> want = {
      {"selector_loss", 0.5},
      {"unary_recall_at_k", 0.5},
      {"teacher_forced_selector_acc", 0.2},
      {"self_conditioned_path_accepted_length", 1.5},
      {"unary_top_k_oracle_accepted_length", 2.5},
      {"unary_path_accepted_length", 2.0}};
  EXPECT_EQ(m.named, want);
  EXPECT_EQ(m.progress, "  sel 0.5000 recall@K 0.500 sel-acc 0.200 tau-path 1.500 tau-oracle 2.500");
  // nothing counted: 0, not NaN
  for (const auto& [k, v] : t.step_metrics(d, at::zeros({9}, at::kDouble)).named) EXPECT_EQ(v, 0.0) << k;
}

}  // namespace
