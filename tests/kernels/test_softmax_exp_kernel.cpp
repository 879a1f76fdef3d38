// The CPU kernels' softmax exp (softmax_exp.h) on special values, for every instruction-set build (isa_param.h):
// NaN stays NaN (a broken step must show in the loss, not vanish into a zero probability), a result beyond
// float's range is +inf (+inf included), below -87 it is an exact 0 (-inf included), and finite arguments
// match std::exp in fp64 to a few ulp. The values sit in the vector body and in the masked tail of the row.
// The cross-entropy rows kernel then carries a NaN logit into its loss.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cross_entropy_rows.h"
#include "isa_param.h"
#include "softmax_exp.h"

using namespace dflash::kernels;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The float exp of the fp64 argument x * scale - offset, or NaN.
void expect_exp(float got, double arg, int64_t t) {
  if (std::isnan(arg)) {
    EXPECT_TRUE(std::isnan(got)) << "t=" << t << ": exp(NaN) gave " << got;
    return;
  }
  if (arg < -87.0) {
    EXPECT_EQ(got, 0.0f) << "t=" << t << ": exp(" << arg << ") should flush to an exact 0";
    return;
  }
  const float want = float(std::exp(arg));  // inf where it overflows float
  if (std::isinf(want)) {
    EXPECT_EQ(got, kInf) << "t=" << t << ": exp(" << arg << ")";
    return;
  }
  EXPECT_NEAR(got, want, 4e-7 * want) << "t=" << t << ": exp(" << arg << ")";
}

// Runs the exp over a 37-long row (two 16-lane bodies or four 8-lane ones, and a tail of 5) holding `specials`
// at body and tail positions among ordinary values; checks every value and the returned sum.
void check_row(const std::vector<float>& specials, float scale, float offset) {
  const int64_t n = 37;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) x[size_t(t)] = -0.37f * float(t % 11);
  const int64_t body = 3, tail = 34;  // a lane in the first vector and one in the tail
  for (size_t i = 0; i < specials.size(); ++i) {
    x[size_t(body + int64_t(i))] = specials[i];
    x[size_t(tail + int64_t(i) % 3)] = specials[i];
  }
  std::vector<float> s = x;
  const float sum = softmax_exp_row_cpu(s.data(), n, scale, offset);
  double want_sum = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    // The kernel forms x * scale - offset in float (one FMA); fp64 of the same is exact enough here.
    const double arg = double(x[size_t(t)]) * double(scale) - double(offset);
    expect_exp(s[size_t(t)], arg, t);
    want_sum += std::isnan(arg) ? std::nan("") : (arg < -87.0 ? 0.0 : std::exp(arg));
  }
  if (std::isnan(want_sum)) EXPECT_TRUE(std::isnan(sum)) << "the sum of a row with a NaN is " << sum;
  else if (float(want_sum) == kInf) EXPECT_EQ(sum, kInf);
  else EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
}

class SoftmaxExpPerIsa : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(SoftmaxExpPerIsa, NanStaysNan) {
  DFLASH_USE_ISA(GetParam());
  check_row({kNan}, 1.0f, 0.0f);
  check_row({kNan, 2.0f, -kNan}, 0.125f, 1.5f);
}

TEST_P(SoftmaxExpPerIsa, InfinitiesGiveInfAndZero) {
  DFLASH_USE_ISA(GetParam());
  check_row({kInf}, 1.0f, 0.0f);
  check_row({-kInf}, 1.0f, 0.0f);
  check_row({-kInf, -kInf, -kInf}, 0.5f, -3.0f);  // masked scores: exp(-inf - m) is an exact 0
  check_row({kInf, -kInf, kNan}, 1.0f, 0.0f);
}

TEST_P(SoftmaxExpPerIsa, EdgesOfTheRange) {
  DFLASH_USE_ISA(GetParam());
  check_row({88.0f, 88.5f, 88.72f}, 1.0f, 0.0f);              // finite up to float's largest exp (n = 128)
  check_row({0x1.62e42ep+6f, 0x1.62e430p+6f, 100.0f}, 1.0f, 0.0f);  // the last finite one, then overflow
  check_row({-86.9f, -87.5f, -1e30f}, 1.0f, 0.0f);            // just above the flush, below it, far below
  check_row({0.0f, 1.0f, -20.0f}, 1.0f, 0.0f);
}

// A NaN logit reaches the loss: the cross-entropy row's lse and ce are NaN, not a finite number that hides it.
TEST_P(SoftmaxExpPerIsa, NanLogitMakesCrossEntropyNan) {
  DFLASH_USE_ISA(GetParam());
  const int64_t rows = 3, vocab = 37;
  for (int64_t nan_at : {int64_t(2), int64_t(20), int64_t(35)}) {  // body, second vector, tail
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.1f * float(i % 13);
    logits[size_t(vocab + nan_at)] = kNan;  // row 1 only
    std::vector<int64_t> labels = {0, 5, 7};
    std::vector<float> lse(static_cast<size_t>(rows)), ce(static_cast<size_t>(rows));
    std::vector<uint8_t> correct(static_cast<size_t>(rows));
    CrossEntropyRowsArgs a;
    a.dtype = ScalarType::Float32;
    a.rows = rows, a.vocab = vocab, a.ld = vocab;
    a.logits = logits.data(), a.labels = labels.data(), a.lse = lse.data(), a.ce = ce.data();
    a.correct = correct.data();
    a.write_grad = false;
    ASSERT_EQ(check_cross_entropy_rows(a), "");
    cross_entropy_rows_cpu(a, 0, rows);
    EXPECT_TRUE(std::isnan(lse[1])) << "NaN at " << nan_at << ": lse " << lse[1];
    EXPECT_TRUE(std::isnan(ce[1])) << "NaN at " << nan_at << ": ce " << ce[1];
    EXPECT_TRUE(std::isfinite(lse[0]) && std::isfinite(lse[2])) << "the other rows stay finite";
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SoftmaxExpPerIsa, dflash::kernels::testing::kEveryIsa,
                         dflash::kernels::testing::isa_label);

}  // namespace
