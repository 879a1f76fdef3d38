// The fused cross-entropy rows kernel against an fp64 loop written from its definition, for float32 and
// bfloat16 logits (rows padded to a leading dimension), with and without the in-place gradient, for every
// instruction-set build (isa_param.h): lse = log sum exp(logits), ce = lse - logit[label], correct = (first argmax
// == label), gradient = (softmax - onehot(label)) * scale, and the padding between rows untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cross_entropy_rows.h"
#include "isa_param.h"

using namespace dflash::kernels;

namespace {

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check(ScalarType dtype, int64_t rows, int64_t vocab, int64_t ld, bool write_grad, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> x(size_t(rows * ld), 0.0);  // the logits as the kernel sees them (after bf16 rounding)
  std::vector<float> f32(x.size(), -7.0f);
  std::vector<uint16_t> b16(x.size(), to_bf16(-7.0f));
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  std::vector<float> scale(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < vocab; ++v) {
      const float val = float(normal(rng));
      const size_t i = size_t(r * ld + v);
      f32[i] = val;
      b16[i] = to_bf16(val);
      x[i] = dtype == ScalarType::BFloat16 ? double(from_bf16(b16[i])) : double(val);
    }
    labels[size_t(r)] = int64_t(rng() % uint64_t(vocab));
    if (r % 3 == 0) {  // make the label the argmax on some rows (and a tie on one: the first argmax counts)
      const size_t i = size_t(r * ld + labels[size_t(r)]);
      f32[i] = 40.0f, b16[i] = to_bf16(40.0f), x[i] = 40.0;
    }
    scale[size_t(r)] = 0.25f + 0.5f * float(r);
  }
  std::vector<float> lse(static_cast<size_t>(rows)), ce(static_cast<size_t>(rows));
  std::vector<uint8_t> correct(static_cast<size_t>(rows));
  CrossEntropyRowsArgs a;
  a.dtype = dtype;
  a.rows = rows, a.vocab = vocab, a.ld = ld;
  a.logits = dtype == ScalarType::BFloat16 ? static_cast<void*>(b16.data()) : static_cast<void*>(f32.data());
  a.labels = labels.data();
  a.scale = scale.data();
  a.write_grad = write_grad;
  a.lse = lse.data(), a.ce = ce.data(), a.correct = correct.data();
  ASSERT_EQ(check_cross_entropy_rows(a), "");
  cross_entropy_rows_cpu(a, 0, rows / 2);  // two disjoint ranges, as two threads would take them
  cross_entropy_rows_cpu(a, rows / 2, rows);

  const double tol = dtype == ScalarType::BFloat16 ? 1e-2 : 1e-5;  // gradients are stored in the logits' dtype
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    int64_t arg = 0;
    for (int64_t v = 0; v < vocab; ++v)
      if (x[size_t(r * ld + v)] > m) m = x[size_t(r * ld + v)], arg = v;
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(x[size_t(r * ld + v)] - m);
    const double want_lse = m + std::log(sum);
    EXPECT_NEAR(lse[size_t(r)], want_lse, 1e-4 * std::abs(want_lse) + 1e-5) << "row " << r;
    EXPECT_NEAR(ce[size_t(r)], want_lse - x[size_t(r * ld + labels[size_t(r)])], 1e-4) << "row " << r;
    EXPECT_EQ(correct[size_t(r)], arg == labels[size_t(r)] ? 1 : 0) << "row " << r;
    for (int64_t v = 0; v < ld; ++v) {
      const size_t i = size_t(r * ld + v);
      const double got = dtype == ScalarType::BFloat16 ? double(from_bf16(b16[i])) : double(f32[i]);
      if (v >= vocab) {  // the padding between rows is never touched
        EXPECT_EQ(got, -7.0) << "row " << r << " pad " << v;
        continue;
      }
      // Without the gradient, float32 logits hold the kernel's scratch exp(x - max), bf16 ones stay.
      const double want = write_grad ? (std::exp(x[i] - want_lse) - (v == labels[size_t(r)] ? 1.0 : 0.0)) * scale[size_t(r)]
                          : dtype == ScalarType::Float32 ? std::exp(x[i] - m)
                                                         : x[i];
      EXPECT_NEAR(got, want, tol * (1.0 + std::abs(want))) << "row " << r << " v " << v;
    }
  }
}

class CrossEntropyRowsPerIsa : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(CrossEntropyRowsPerIsa, Float32MatchesFp64) {
  DFLASH_USE_ISA(GetParam());
  check(ScalarType::Float32, 7, 1000, 1000, true, 1);
  check(ScalarType::Float32, 5, 333, 340, true, 2);    // vocab not a vector multiple, padded rows
  check(ScalarType::Float32, 4, 64, 64, false, 3);     // statistics only: the logits stay
}

TEST_P(CrossEntropyRowsPerIsa, BFloat16MatchesFp64) {
  DFLASH_USE_ISA(GetParam());
  check(ScalarType::BFloat16, 6, 1000, 1000, true, 4);
  check(ScalarType::BFloat16, 3, 97, 104, true, 5);
  check(ScalarType::BFloat16, 3, 97, 97, false, 6);
}

INSTANTIATE_TEST_SUITE_P(Isa, CrossEntropyRowsPerIsa, dflash::kernels::testing::kEveryIsa,
                         dflash::kernels::testing::isa_label);

TEST(CrossEntropyRowsChecks, NameTheProblem) {
  std::vector<int64_t> labels{3, 12};
  std::vector<float> buf(40), lse(2), ce(2);
  std::vector<uint8_t> ok(2);
  CrossEntropyRowsArgs a;
  a.rows = 2, a.vocab = 10, a.ld = 20;
  a.logits = buf.data(), a.labels = labels.data(), a.lse = lse.data(), a.ce = ce.data(), a.correct = ok.data();
  EXPECT_EQ(check_cross_entropy_rows(a), "cross-entropy rows: label 12 of row 1 is outside the vocabulary [0, 10)");
  a.ld = 5;
  EXPECT_EQ(check_cross_entropy_rows(a), "cross-entropy rows: need vocab > 0 and ld >= vocab");
  a.ld = 20;
  a.dtype = ScalarType::Float64;
  EXPECT_EQ(check_cross_entropy_rows(a), "cross-entropy rows: logits must be float32 or bfloat16");
  a.dtype = ScalarType::Float32;
  a.write_grad = true;  // no scale
  EXPECT_EQ(check_cross_entropy_rows(a), "cross-entropy rows: a pointer is missing");
}

}  // namespace
