// The fused DSpark objective rows kernel (dspark_objective_rows.h) against an fp64 loop written from the formulas
// (docs/DSPARK.md), for float32 and bfloat16 logits with padded rows, for every instruction-set build: lse, ce, the
// L1 between softmax(logits) and softmax(teacher), a* = clamp(1 - L1/2, 0, 1), the confidence BCE and its
// gradient, the first-argmax flag and the gradient written over the logits
// scale (q (ce_w + l1_w (s - <s, q>)) - ce_w onehot) with s = sign(q - pi). Rows include a teacher equal to the
// drafter (q == pi: sign 0 everywhere, L1 0, a* 1), disjoint peaks (L1 near 2: the clamp) and an argmax tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dspark_objective_rows.h"
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

// Logits as the kernel sees them (bf16-rounded for bf16) in x, and the buffers handed to it.
struct Rows {
  std::vector<double> x;
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  void set(size_t i, float v, bool bf) {
    f32[i] = v, b16[i] = to_bf16(v);
    x[i] = bf ? double(from_bf16(b16[i])) : double(v);
  }
  void* data(ScalarType dt) { return dt == ScalarType::BFloat16 ? static_cast<void*>(b16.data()) : f32.data(); }
  double at(size_t i, ScalarType dt) const { return dt == ScalarType::BFloat16 ? double(from_bf16(b16[i])) : f32[i]; }
};

Rows make_rows(int64_t rows, int64_t ld) {
  return Rows{std::vector<double>(size_t(rows * ld), -7.0), std::vector<float>(size_t(rows * ld), -7.0f),
              std::vector<uint16_t>(size_t(rows * ld), to_bf16(-7.0f))};
}

std::vector<double> softmax(const double* x, int64_t V) {
  double m = -INFINITY, sum = 0;
  for (int64_t v = 0; v < V; ++v) m = std::max(m, x[v]);
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) sum += p[size_t(v)] = std::exp(x[v] - m);
  for (auto& e : p) e /= sum;
  return p;
}

void check(ScalarType dt, int64_t rows, int64_t V, int64_t ld, bool teacher, bool conf, bool write_grad,
           uint64_t seed) {
  const bool bf = dt == ScalarType::BFloat16;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 2.0);
  Rows x = make_rows(rows, ld), z = make_rows(rows, ld + 3);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  std::vector<float> scale(static_cast<size_t>(rows)), c(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    labels[size_t(r)] = int64_t(rng() % uint64_t(V));
    scale[size_t(r)] = 0.25f + 0.5f * float(r);
    c[size_t(r)] = float(normal(rng));
    for (int64_t v = 0; v < V; ++v) {
      const float a = float(normal(rng)), b = float(normal(rng));
      x.set(size_t(r * ld + v), a, bf);
      // row 1: the teacher equals the drafter (q == pi exactly); row 2: disjoint sharp peaks (L1 near 2)
      z.set(size_t(r * (ld + 3) + v), r == 1 ? a : r == 2 ? -30.0f : b, bf);
    }
    if (r == 2) {
      x.set(size_t(r * ld + 0), 40.0f, bf);
      z.set(size_t(r * (ld + 3) + V - 1), 40.0f, bf);
    }
    if (r == 3) {  // a tie for the argmax: the first one counts, and it is the label
      labels[size_t(r)] = 1;
      x.set(size_t(r * ld + 1), 30.0f, bf), x.set(size_t(r * ld + 4), 30.0f, bf);
    }
  }
  std::vector<float> lse(static_cast<size_t>(rows)), ce(static_cast<size_t>(rows)), l1(static_cast<size_t>(rows)), accept(static_cast<size_t>(rows)), bce(static_cast<size_t>(rows)),
      dconf(static_cast<size_t>(rows));
  std::vector<uint8_t> correct(static_cast<size_t>(rows));
  const std::vector<double> x0 = x.x, z0 = z.x;
  DSparkRowsArgs a;
  a.dtype = dt;
  a.rows = rows, a.vocab = V, a.ld = ld, a.teacher_ld = ld + 3;
  a.logits = x.data(dt);
  a.teacher = teacher ? z.data(dt) : nullptr;
  a.labels = labels.data(), a.scale = scale.data();
  a.ce_weight = 0.3f, a.l1_weight = 0.9f, a.confidence_weight = 1.5f;
  a.write_grad = write_grad;
  a.confidence = conf ? c.data() : nullptr;
  a.lse = lse.data(), a.ce = ce.data(), a.l1 = l1.data(), a.accept = accept.data(), a.correct = correct.data();
  a.bce = bce.data(), a.dconf = dconf.data();
  ASSERT_EQ(check_dspark_rows(a), "");
  dspark_rows_cpu(a, 0, rows / 2);  // two disjoint ranges, as two threads would take them
  dspark_rows_cpu(a, rows / 2, rows);

  const double gtol = bf ? 1e-2 : 1e-5;  // gradients are stored in the logits' dtype
  for (int64_t r = 0; r < rows; ++r) {
    const size_t ri = size_t(r);
    const double* xr = x0.data() + r * ld;
    const std::vector<double> q = softmax(xr, V);
    double m = -INFINITY;
    int64_t arg = 0;
    for (int64_t v = 0; v < V; ++v)
      if (xr[v] > m) m = xr[v], arg = v;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(xr[v] - m);
    const double want_lse = m + std::log(sum);
    EXPECT_NEAR(lse[ri], want_lse, 1e-5 * (1 + std::abs(want_lse))) << "row " << r;
    EXPECT_NEAR(ce[ri], want_lse - xr[labels[ri]], 2e-5 * (1 + std::abs(want_lse))) << "row " << r;
    EXPECT_EQ(correct[ri], arg == labels[ri] ? 1 : 0) << "row " << r;
    std::vector<double> sgn(size_t(V), 0.0);
    double want_l1 = 0, sq = 0;
    if (teacher) {
      const std::vector<double> pi = softmax(z0.data() + r * (ld + 3), V);
      for (int64_t v = 0; v < V; ++v) {
        const double d = q[size_t(v)] - pi[size_t(v)];
        want_l1 += std::abs(d);
        sgn[size_t(v)] = r == 1 ? 0.0 : (d > 0) - (d < 0);  // row 1: equal rows, the kernel sees d == 0
        sq += sgn[size_t(v)] * q[size_t(v)];
      }
    }
    const double want_accept = teacher ? std::clamp(1 - want_l1 / 2, 0.0, 1.0) : 0.0;
    EXPECT_NEAR(l1[ri], want_l1, 2e-5) << "row " << r;
    EXPECT_NEAR(accept[ri], want_accept, 1e-5) << "row " << r;
    if (teacher && r == 1) EXPECT_EQ(l1[ri], 0.0f);
    if (teacher && r == 2) EXPECT_EQ(accept[ri], 0.0f) << "L1 " << l1[ri] << " rounds past 2: clamped";
    if (conf) {
      const double cc = c[ri];
      EXPECT_NEAR(bce[ri], std::max(cc, 0.0) - cc * want_accept + std::log1p(std::exp(-std::abs(cc))), 2e-5);
      if (write_grad) EXPECT_NEAR(dconf[ri], 1.5 * scale[ri] * (1 / (1 + std::exp(-cc)) - want_accept), 2e-5);
    }
    for (int64_t v = 0; v < ld; ++v) {
      const double got = x.at(size_t(r * ld + v), dt);
      if (v >= V) {  // the padding between rows is never touched
        EXPECT_EQ(got, -7.0) << "row " << r << " pad " << v;
        continue;
      }
      const double qv = q[size_t(v)];
      const double want = write_grad ? scale[ri] * (qv * (0.3 + (teacher ? 0.9 * (sgn[size_t(v)] - sq) : 0.0)) -
                                                    (v == labels[ri] ? 0.3 : 0.0))
                          : bf ? xr[v]
                               : qv;  // without the gradient float32 logits hold q
      EXPECT_NEAR(got, want, gtol * (1.0 + std::abs(want))) << "row " << r << " v " << v;
    }
  }
  if (bf && teacher)  // bf16 teacher rows are read, never written
    for (size_t i = 0; i < z0.size(); ++i) ASSERT_EQ(z.at(i, dt), z0[i]) << i;
}

class DSparkRowsPerIsa : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(DSparkRowsPerIsa, Float32MatchesFp64) {
  DFLASH_USE_ISA(GetParam());
  check(ScalarType::Float32, 6, 1000, 1000, true, true, true, 1);
  check(ScalarType::Float32, 5, 333, 340, true, false, true, 2);  // vocab not a vector multiple, padded rows
  check(ScalarType::Float32, 4, 64, 64, true, true, false, 3);    // statistics only
  check(ScalarType::Float32, 4, 77, 80, false, false, true, 4);   // no teacher: CE alone
}

TEST_P(DSparkRowsPerIsa, BFloat16MatchesFp64) {
  DFLASH_USE_ISA(GetParam());
  check(ScalarType::BFloat16, 6, 1000, 1000, true, true, true, 5);
  check(ScalarType::BFloat16, 4, 97, 104, true, false, true, 6);
  check(ScalarType::BFloat16, 4, 97, 97, true, true, false, 7);
}

// Issue 51: rows that share a target position read one teacher row (teacher_rows). Every output equals the run
// over a teacher row per drafted row, bit for bit, and the shared rows are left as they were (float32 included,
// whose own rows the kernel otherwise uses as scratch).
void check_shared_teacher(ScalarType dt, uint64_t seed) {
  const int64_t rows = 7, V = 301, ld = 304, distinct = 3;
  const std::vector<int64_t> which{2, 0, 2, 1, 1, 0, 2};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 2.0);
  const bool bf = dt == ScalarType::BFloat16;
  Rows x = make_rows(rows, ld), shared = make_rows(distinct, ld), expanded = make_rows(rows, ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < V; ++v) x.set(size_t(r * ld + v), float(normal(rng)), bf);
  for (int64_t t = 0; t < distinct; ++t)
    for (int64_t v = 0; v < V; ++v) shared.set(size_t(t * ld + v), float(normal(rng)), bf);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < V; ++v)
      expanded.set(size_t(r * ld + v), shared.f32[size_t(which[size_t(r)] * ld + v)], bf);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  std::vector<float> scale(static_cast<size_t>(rows)), c(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    labels[size_t(r)] = int64_t(rng() % uint64_t(V)), scale[size_t(r)] = 0.5f + float(r), c[size_t(r)] = float(normal(rng));
  struct Out {
    std::vector<float> lse, ce, l1, accept, bce, dconf, grad;
    std::vector<uint8_t> correct;
  };
  auto run = [&](Rows& teacher, const int64_t* teacher_rows) {
    Rows logits = x;
    Out o{std::vector<float>(size_t(rows)), std::vector<float>(size_t(rows)), std::vector<float>(size_t(rows)),
          std::vector<float>(size_t(rows)), std::vector<float>(size_t(rows)), std::vector<float>(size_t(rows)), {},
          std::vector<uint8_t>(size_t(rows))};
    DSparkRowsArgs a;
    a.dtype = dt;
    a.rows = rows, a.vocab = V, a.ld = ld, a.teacher_ld = ld;
    a.logits = logits.data(dt), a.teacher = teacher.data(dt);
    a.teacher_rows = teacher_rows, a.teacher_count = teacher_rows ? distinct : 0;
    a.labels = labels.data(), a.scale = scale.data(), a.confidence = c.data(), a.write_grad = true;
    a.lse = o.lse.data(), a.ce = o.ce.data(), a.l1 = o.l1.data(), a.accept = o.accept.data();
    a.correct = o.correct.data(), a.bce = o.bce.data(), a.dconf = o.dconf.data();
    EXPECT_EQ(check_dspark_rows(a), "");
    dspark_rows_cpu(a, 0, 3);
    dspark_rows_cpu(a, 3, rows);
    for (size_t i = 0; i < logits.x.size(); ++i) o.grad.push_back(float(logits.at(i, dt)));
    return o;
  };
  const Rows shared0 = shared;
  const Out want = run(expanded, nullptr), got = run(shared, which.data());
  EXPECT_EQ(got.lse, want.lse);
  EXPECT_EQ(got.ce, want.ce);
  EXPECT_EQ(got.l1, want.l1);
  EXPECT_EQ(got.accept, want.accept);
  EXPECT_EQ(got.bce, want.bce);
  EXPECT_EQ(got.dconf, want.dconf);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_EQ(got.grad, want.grad);
  for (size_t i = 0; i < shared.x.size(); ++i) ASSERT_EQ(shared.at(i, dt), shared0.at(i, dt)) << i;
}

TEST_P(DSparkRowsPerIsa, SharedTeacherRowsEqualOneRowPerDraftedRow) {
  DFLASH_USE_ISA(GetParam());
  check_shared_teacher(ScalarType::Float32, 11);
  check_shared_teacher(ScalarType::BFloat16, 12);
}

INSTANTIATE_TEST_SUITE_P(Isa, DSparkRowsPerIsa, dflash::kernels::testing::kEveryIsa,
                         dflash::kernels::testing::isa_label);

TEST(DSparkRowsChecks, NameTheProblem) {
  std::vector<int64_t> labels{3, 12};
  std::vector<float> buf(40), out(2), scale(2, 1.0f);
  std::vector<uint8_t> ok(2);
  DSparkRowsArgs a;
  a.rows = 2, a.vocab = 10, a.ld = 20;
  a.logits = buf.data(), a.labels = labels.data(), a.lse = out.data(), a.ce = out.data(), a.l1 = out.data();
  a.accept = out.data(), a.correct = ok.data();
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: label 12 of row 1 is outside the vocabulary [0, 10)");
  labels[1] = 2;
  a.ld = 5;
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: need vocab > 0, ld >= vocab and teacher_ld >= vocab");
  a.ld = 20;
  a.dtype = ScalarType::Float64;
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: logits must be float32 or bfloat16");
  a.dtype = ScalarType::Float32;
  a.write_grad = true;  // no scale
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: scale is missing");
  a.scale = scale.data();
  a.confidence = scale.data();  // no teacher
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: the confidence head needs the teacher's logits");
  a.confidence = nullptr;
  std::vector<int64_t> trows{0, 2};
  a.teacher_rows = trows.data();  // no teacher
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: teacher_rows without the teacher's logits");
  a.teacher = buf.data(), a.teacher_ld = 10, a.teacher_count = 2;
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: teacher row 2 of row 1 is outside [0, 2)");
  a.teacher = nullptr, a.teacher_rows = nullptr;
  a.l1_weight = -1;
  EXPECT_EQ(check_dspark_rows(a), "dspark rows: the loss weights must be finite and >= 0");
}

}  // namespace
