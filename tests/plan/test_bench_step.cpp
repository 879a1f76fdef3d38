// `bench step` as a function (bench_step.h): a tiny run without a process, and what it must hold whatever the
// machine: one row per policy, a finite loss, a plan, and the same loss with and without checkpointing (recomputing
// a layer changes where memory goes, not the math).
#include <gtest/gtest.h>

#include <cmath>

#include "bench_step.h"
#include "drafter_presets.h"

using namespace dflash;

TEST(BenchStep, RunsAsAFunction) {
  plan::BenchStepOptions o;
  o.drafter = plan::drafter_preset("cpu-small", "test").drafter;
  o.model_name = "cpu-small";
  o.seq_len = 64;
  o.anchors = 4;
  o.loss_chunk_rows = 64;
  o.iters = 1;
  o.policies = {drafter::CheckpointPolicy{0}, drafter::CheckpointPolicy{1}};
  o.reference = false;
  o.generic_ce = false;
  o.attention_backend = ops::AttentionBackend::Reference;
  const nlohmann::json out = plan::run_bench_step(o);
  EXPECT_EQ(out["attention_backend"], "reference");
  ASSERT_EQ(out["runs"].size(), 2u);
  EXPECT_EQ(out["runs"][0]["policy"], "none");
  EXPECT_EQ(out["runs"][1]["policy"], "layer");
  const double none = out["runs"][0]["loss"], layer = out["runs"][1]["loss"];
  EXPECT_TRUE(std::isfinite(none) && none > 0) << none;
  EXPECT_NEAR(layer, none, 1e-5 * none);
  for (const auto& r : out["runs"]) EXPECT_GT(r["planned_peak_bytes"].get<double>(), 0);
}

// The planned-vs-measured verdict each run reports ("plan_within_10_percent"): within 10% either way, and never for
// a step that measured nothing.
TEST(BenchStep, PlanToleranceIsTenPercentEitherWay) {
  EXPECT_TRUE(plan::plan_within_tolerance(109, 100));
  EXPECT_TRUE(plan::plan_within_tolerance(91, 100));
  EXPECT_FALSE(plan::plan_within_tolerance(111, 100));
  EXPECT_FALSE(plan::plan_within_tolerance(89, 100));
  EXPECT_FALSE(plan::plan_within_tolerance(100, 0));
}
