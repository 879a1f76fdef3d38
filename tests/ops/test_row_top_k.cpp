// ops::row_top_k (DFlash2's candidates in one scan of a logits chunk) and row_top_k_by_threshold (the same from ATen
// ops: CUDA's path, run here on the CPU) against a stable descending sort: ties to the lower column, NaN as -inf,
// strided rows, every dtype; and their argument errors.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "row_top_k.h"

using dflash::ops::row_top_k;
using dflash::ops::row_top_k_by_threshold;

namespace {

// The reference: a stable descending sort with NaN mapped to -inf.
std::pair<at::Tensor, at::Tensor> sorted_top(const at::Tensor& x, int64_t k) {
  const at::Tensor keyed = at::where(at::isnan(x), at::full({}, -std::numeric_limits<double>::infinity(), x.options()), x);
  const at::Tensor order = std::get<1>(at::sort(keyed, /*stable=*/true, -1, /*descending=*/true)).narrow(-1, 0, k);
  return {x.gather(-1, order), order};
}

}  // namespace

TEST(RowTopK, EqualsAStableDescendingSortWithTiesToTheLowerColumn) {
  at::manual_seed(5);
  for (auto dtype : {at::kDouble, at::kFloat, at::kBFloat16})
    for (int64_t V : {1, 7, 64, 65, 300, 4099})
      for (int64_t k : {1, 3, 16, 64}) {
        if (k > V) continue;
        // Few distinct values: ties at the k-th value in most rows, and rows sorted ascending (every column inserts).
        at::Tensor x = at::randint(-6, 7, {9, V}, at::TensorOptions().dtype(dtype));
        x[1] = at::arange(V, x.options());
        x[2] = at::randn({V}, x.options());
        x[3].fill_(2.0);
        if (V > 4) x[4][V / 2] = std::numeric_limits<double>::quiet_NaN();
        x[5].fill_(std::numeric_limits<double>::quiet_NaN());
        x[6].fill_(-std::numeric_limits<double>::infinity());
        const auto [rv, ri] = sorted_top(x, k);
        for (const auto& top : {row_top_k(x, k), row_top_k_by_threshold(x, k)}) {
          const auto& [v, i] = top;
          EXPECT_TRUE(at::equal(i, ri)) << dtype << " V " << V << " k " << k;
          EXPECT_EQ(v.scalar_type(), dtype);
          EXPECT_TRUE(at::equal(at::nan_to_num(v, 0.0), at::nan_to_num(rv, 0.0))) << dtype << " V " << V << " k " << k;
        }
      }
}

TEST(RowTopK, ThresholdPathTakesRowsInBlocksOf64) {
  at::manual_seed(7);
  const at::Tensor x = at::randint(-4, 5, {150, 300}, at::kBFloat16);  // ties at the 16th value in every row
  const auto [v, i] = row_top_k_by_threshold(x, 16);
  EXPECT_TRUE(at::equal(i, sorted_top(x, 16).second));
  EXPECT_TRUE(at::equal(v, sorted_top(x, 16).first));
}

TEST(RowTopK, ReadsStridedRows) {
  at::manual_seed(6);
  const at::Tensor wide = at::randint(-3, 4, {5, 40}, at::kFloat);
  const at::Tensor x = wide.narrow(1, 3, 30);  // row stride 40
  for (const auto& top : {row_top_k(x, 8), row_top_k_by_threshold(x, 8)}) {
    EXPECT_TRUE(at::equal(top.second, sorted_top(x, 8).second));
    EXPECT_TRUE(at::equal(top.first, sorted_top(x, 8).first));
  }
}

TEST(RowTopK, RefusesWhatItCannotScan) {
  const auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const at::Tensor x = at::zeros({2, 5});
  EXPECT_NE(message([&] { row_top_k(x, 6); }).find("selector_top_k must be in [1, 5], got 6"), std::string::npos);
  EXPECT_NE(message([&] { row_top_k(x, 0); }).find("selector_top_k must be in [1, 5], got 0"), std::string::npos);
  EXPECT_NE(message([&] { row_top_k(x.to(at::kHalf), 2); }).find("float, double or bfloat16"), std::string::npos);
  EXPECT_NE(message([&] { row_top_k(at::zeros({5}), 2); }).find("need logits [rows, V]"), std::string::npos);
  EXPECT_NE(message([&] { row_top_k_by_threshold(x, 6); }).find("selector_top_k must be in [1, 5], got 6"),
            std::string::npos);
}
