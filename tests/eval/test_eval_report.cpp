// DatasetReport's tau and its standard error over prompts, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "eval_report.h"

namespace dflash::eval {
namespace {

SpecResult cycles(std::vector<int64_t> accept_lengths) {
  SpecResult s;
  s.accept_lengths = std::move(accept_lengths);
  return s;
}

TEST(EvalReport, TauStderrTreatsPromptsAsTheUnit) {
  DatasetReport r("d", 4);
  r.add(cycles({3, 1}), 0, 0, /*prompt_index=*/0);  // 4 tokens in 2 cycles
  r.add(cycles({1, 1}), 0, 0, /*prompt_index=*/1);  // 2 tokens in 2 cycles
  EXPECT_DOUBLE_EQ(r.tau(), 1.5);
  // residuals a_i - tau c_i = 4 - 3, 2 - 3; sqrt(2 / 1 * 2) / 4
  EXPECT_DOUBLE_EQ(r.tau_stderr(), 0.5);
  // A repeat of prompt 1 joins its cluster: (4, 4) -> tau 8 / 6; residuals 4 - 8/3, 4 - 16/3.
  r.add(cycles({1, 1}), 0, 0, 1);
  EXPECT_DOUBLE_EQ(r.tau(), 8.0 / 6.0);
  EXPECT_NEAR(r.tau_stderr(), std::sqrt(2.0 * (16.0 / 9 + 16.0 / 9)) / 6.0, 1e-12);
  EXPECT_EQ(r.by_prompt.size(), 2u);
}

TEST(EvalReport, TauStderrIsZeroWhenEveryPromptAgreesAndUndefinedForOnePrompt) {
  DatasetReport same("d", 4);
  same.add(cycles({4, 4}), 0, 0, 0);
  EXPECT_TRUE(std::isnan(same.tau_stderr()));
  same.add(cycles({4, 4, 4}), 0, 0, 1);
  EXPECT_DOUBLE_EQ(same.tau(), 4.0);
  EXPECT_DOUBLE_EQ(same.tau_stderr(), 0.0);
  EXPECT_TRUE(same.to_json()["tau_stderr"].is_number());
  DatasetReport one("d", 4);
  one.add(cycles({2}), 0, 0, 0);
  EXPECT_TRUE(one.to_json()["tau_stderr"].is_null());
}

}  // namespace
}  // namespace dflash::eval
