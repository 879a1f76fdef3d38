// DSpark's confidence truncation at eval (dspark_drafting.h): the draft keeps the leading slots whose
// cumulative product of sigmoid(confidence) stays >= the threshold; 0 turns it off.
#include <gtest/gtest.h>

#include <cmath>

#include "dspark_drafting.h"

namespace {
double logit(double p) { return std::log(p / (1 - p)); }
}  // namespace

TEST(DSparkConfidence, StopsWhereTheCumulativeProductFallsBelowTheThreshold) {
  using dflash::families::confident_draft_length;
  // sigmoid: 0.9, 0.9, 0.5, 0.99 -> cumulative 0.9, 0.81, 0.405, 0.40095
  const std::vector<double> c = {logit(0.9), logit(0.9), logit(0.5), logit(0.99)};
  EXPECT_EQ(confident_draft_length(c, 0.0), 4);    // off
  EXPECT_EQ(confident_draft_length(c, 0.95), 0);   // the first slot already below
  EXPECT_EQ(confident_draft_length(c, 0.85), 1);
  EXPECT_EQ(confident_draft_length(c, 0.81 - 1e-9), 2);
  EXPECT_EQ(confident_draft_length(c, 0.5), 2);    // 0.405 < 0.5: not each slot's own 0.99, the product
  EXPECT_EQ(confident_draft_length(c, 0.4), 4);
  EXPECT_EQ(confident_draft_length(c, 0.401), 3);  // the 4th product 0.40095 is below
  EXPECT_EQ(confident_draft_length({}, 0.5), 0);
}
