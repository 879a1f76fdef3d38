#include "row_top_k.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <limits>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

namespace dflash::ops {
namespace {

constexpr int64_t kMaxTopK = 1024;

// One row's k columns. The kept entries stay sorted (value descending, column ascending); columns arrive in
// ascending order, so a value equal to the k-th never displaces it and only values above the k-th are inserted.
// Most of a row is below the k-th value after a few hundred columns: blocks of 64 are first tested with a
// branch-free any(). NaN compares as -inf.
template <typename T>
void scan_row(const T* x, int64_t V, int64_t k, int64_t* kept) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  A vals[kMaxTopK];
  int64_t n = 0;
  auto insert = [&](A v, int64_t j) {
    int64_t p = std::min(n, k - 1);
    while (p > 0 && vals[p - 1] < v) {
      vals[p] = vals[p - 1];
      kept[p] = kept[p - 1];
      --p;
    }
    vals[p] = v;
    kept[p] = j;
    n = std::min(n + 1, k);
  };
  int64_t j = 0;
  for (; j < k; ++j) {
    const A v = A(x[j]);
    insert(std::isnan(v) ? -std::numeric_limits<A>::infinity() : v, j);
  }
  constexpr int64_t kBlock = 64;
  for (; j < V; j += kBlock) {
    const int64_t len = std::min(kBlock, V - j);
    const A t = vals[k - 1];
    int any = 0;
    for (int64_t q = 0; q < len; ++q) any |= A(x[j + q]) > t;
    if (!any) continue;
    for (int64_t q = 0; q < len; ++q)
      if (A(x[j + q]) > vals[k - 1]) insert(A(x[j + q]), j + q);
  }
}

}  // namespace

at::Tensor unary_logits(const at::Tensor& raw, double output_multiplier, double final_logit_softcapping) {
  at::Tensor u = output_multiplier == 1.0 ? raw : raw * output_multiplier;
  if (final_logit_softcapping > 0) u = at::tanh(u / final_logit_softcapping) * final_logit_softcapping;
  return u;
}

namespace {

void check_top_k_args(const at::Tensor& rows, int64_t k) {
  if (!rows.defined() || rows.dim() != 2) throw std::invalid_argument("row top-K: need logits [rows, V]");
  const at::ScalarType dt = rows.scalar_type();
  if (dt != at::kFloat && dt != at::kDouble && dt != at::kBFloat16)
    throw std::invalid_argument(std::string("row top-K: logits must be float, double or bfloat16, got ") +
                                c10::toString(dt));
  const int64_t V = rows.size(1);
  if (k < 1 || k > V || k > kMaxTopK)
    throw std::invalid_argument("row top-K: selector_top_k must be in [1, " + std::to_string(std::min(V, kMaxTopK)) +
                                "], got " + std::to_string(k));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> row_top_k_by_threshold(const at::Tensor& rows, int64_t k) {
  check_top_k_args(rows, k);
  const at::ScalarType dt = rows.scalar_type();
  const int64_t r = rows.size(0), V = rows.size(1);
  at::Tensor ids = at::empty({r, k}, rows.options().dtype(at::kLong));
  at::Tensor vals = at::empty({r, k}, rows.options());
  const at::Tensor columns = at::arange(V, ids.options());
  for (int64_t r0 = 0; r0 < r; r0 += 64) {
    const int64_t n = std::min<int64_t>(64, r - r0);
    // float holds every bfloat16 exactly; NaN sorts as -inf, as in the scan.
    at::Tensor x = rows.narrow(0, r0, n).to(dt == at::kDouble ? at::kDouble : at::kFloat);
    x = x.masked_fill(at::isnan(x), -std::numeric_limits<double>::infinity());
    const at::Tensor kth = std::get<0>(at::topk(x, k, 1)).narrow(1, k - 1, 1);
    const at::Tensor above = x > kth;
    const at::Tensor equal = x == kth;
    const at::Tensor ties_kept = k - above.sum(1, /*keepdim=*/true);
    const at::Tensor keep = above.logical_or_(equal.logical_and(equal.cumsum(1, at::kInt) <= ties_kept));
    // masked_select walks row by row, columns ascending: k per row.
    const at::Tensor cols = columns.expand({n, V}).masked_select(keep).view({n, k});
    const auto [v, order] = at::sort(x.gather(1, cols), /*stable=*/true, 1, /*descending=*/true);
    ids.narrow(0, r0, n).copy_(cols.gather(1, order));
    vals.narrow(0, r0, n).copy_(rows.narrow(0, r0, n).gather(1, ids.narrow(0, r0, n)));
  }
  return {vals, ids};
}

std::pair<at::Tensor, at::Tensor> row_top_k(const at::Tensor& rows, int64_t k) {
  if (rows.defined() && !rows.device().is_cpu()) return row_top_k_by_threshold(rows, k);
  check_top_k_args(rows, k);
  const at::ScalarType dt = rows.scalar_type();
  const int64_t r = rows.size(0), V = rows.size(1);
  const at::Tensor x = rows.stride(1) == 1 ? rows : rows.contiguous();
  at::Tensor ids = at::empty({r, k}, rows.options().dtype(at::kLong));
  at::Tensor vals;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, dt, "row_top_k", [&] {
    using A = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    at::Tensor v = at::empty({r, k}, rows.options().dtype(std::is_same_v<A, double> ? at::kDouble : at::kFloat));
    const scalar_t* base = x.data_ptr<scalar_t>();
    const int64_t ld = x.stride(0);
    A* out_v = v.data_ptr<A>();
    int64_t* out_i = ids.data_ptr<int64_t>();
    at::parallel_for(0, r, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        scan_row(base + i * ld, V, k, out_i + i * k);
        // exact: the kept values are the row's own, re-read from it (float holds every bfloat16, double itself)
        for (int64_t q = 0; q < k; ++q) out_v[i * k + q] = A(base[i * ld + out_i[i * k + q]]);
      }
    });
    vals = v.to(dt);
  });
  return {vals, ids};
}

}  // namespace dflash::ops
