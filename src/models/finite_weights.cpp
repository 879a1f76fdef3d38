#include "finite_weights.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace dflash::models {
namespace {

constexpr int64_t kSlice = int64_t(1) << 24;  // elements per isfinite pass: 16 MiB of booleans at most

std::string index_text(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = sizes[d] > 0 ? flat % sizes[d] : 0;
    flat = sizes[d] > 0 ? flat / sizes[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

}  // namespace

bool all_finite(const at::Tensor& t) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type())) return true;
  const at::Tensor flat = t.reshape({-1});
  for (int64_t pos = 0; pos < flat.numel(); pos += kSlice)
    if (!at::isfinite(flat.narrow(0, pos, std::min(kSlice, flat.numel() - pos))).all().item<bool>()) return false;
  return true;
}

void check_finite_weight(const at::Tensor& held, const at::Tensor& stored, const std::string& name,
                         const std::string& how) {
  if (all_finite(held)) return;
  const at::Tensor bad = at::isfinite(held.reshape({-1})).logical_not();  // the error path only
  const int64_t count = bad.sum().item<int64_t>();
  const int64_t first = bad.nonzero().flatten().index({0}).item<int64_t>();
  std::string cause = how;
  if (stored.defined() && !stored.is_same(held) && all_finite(stored))
    cause = " after conversion to " + std::string(c10::toString(held.scalar_type())) +
            " (values beyond that dtype's range; load it in a wider dtype)";
  throw std::runtime_error("target weights: tensor '" + name + "' holds " + std::to_string(count) + " NaN/Inf value" +
                           (count == 1 ? "" : "s") + " of " + std::to_string(held.numel()) + " (the first at " +
                           index_text(first, held.sizes()) + ")" + cause +
                           "; the checkpoint is damaged or was written by a broken tool");
}

}  // namespace dflash::models
