// few_rows_linear (the W·xᵀ path for 1-8 rows on CPU) against a dense fp64 reference: every row count around
// the threshold, with and without bias, batched [b, T, in] and non-contiguous inputs; other dtypes fall back.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "few_rows_linear.h"

using dflash::models::few_rows_linear;
using dflash::models::kFewRowsMax;

namespace {

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
  return b.defined() ? y + b.to(at::kDouble) : y;
}

}  // namespace

TEST(FewRowsLinear, MatchesFp64ReferenceForEveryRowCount) {
  at::manual_seed(0);
  const at::Tensor w = at::randn({300, 96});
  const at::Tensor b = at::randn({300});
  for (int64_t rows = 1; rows <= kFewRowsMax + 3; ++rows) {
    const at::Tensor x = at::randn({rows, 96});
    for (bool bias : {false, true}) {
      const at::Tensor bb = bias ? b : at::Tensor();
      const at::Tensor y = few_rows_linear(x, w, bb);
      ASSERT_EQ(y.sizes(), (at::IntArrayRef{rows, 300})) << rows;
      EXPECT_TRUE(at::allclose(y.to(at::kDouble), reference(x, w, bb), 1e-5, 1e-4)) << rows << " rows, bias " << bias;
    }
  }
}

TEST(FewRowsLinear, KeepsLeadingDimsAndReadsStridedInput) {
  at::manual_seed(1);
  const at::Tensor w = at::randn({64, 32});
  const at::Tensor big = at::randn({1, 10, 48});
  const at::Tensor x = big.narrow(1, 2, 4).narrow(2, 5, 32);  // [1, 4, 32], not contiguous
  const at::Tensor y = few_rows_linear(x, w);
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{1, 4, 64}));
  EXPECT_TRUE(at::allclose(y.to(at::kDouble), reference(x, w, {}), 1e-5, 1e-4));
  const at::Tensor one = x.narrow(1, 0, 1);  // [1, 1, 32]: the duplicated-row path
  EXPECT_TRUE(at::allclose(few_rows_linear(one, w).to(at::kDouble), reference(one, w, {}), 1e-5, 1e-4));
}

TEST(FewRowsLinear, OtherDtypesAndShapeErrorsGoThroughAtLinear) {
  const at::Tensor w = at::randn({16, 8}, at::kDouble);
  const at::Tensor x = at::randn({2, 8}, at::kDouble);
  EXPECT_TRUE(at::equal(few_rows_linear(x, w), at::linear(x, w)));  // fp64: at::linear, bit for bit
  // A wrong inner size must fail as at::linear fails, not be reshaped into something else.
  EXPECT_ANY_THROW(few_rows_linear(at::randn({2, 7}), at::randn({16, 8})));
}
