#include "selfcheck_tolerance.h"

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace dflash::ops {
namespace {

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

double max_abs_diff(const at::Tensor& x, const at::Tensor& ref) {
  return (x.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace

double machine_eps(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return std::ldexp(1.0, -7);
    case at::kHalf: return std::ldexp(1.0, -10);
    case at::kFloat: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

std::string short_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    case at::kFloat: return "fp32";
    case at::kDouble: return "fp64";
    default: return c10::toString(t);
  }
}

TensorCheck compare_to_exact(const std::string& name, const at::Tensor& fused, const at::Tensor& low,
                             const at::Tensor& exact, at::ScalarType dtype, double floor_growth) {
  TensorCheck t;
  t.name = name;
  t.error = max_abs_diff(fused, exact);
  t.low_error = max_abs_diff(low, exact);
  t.magnitude = exact.abs().max().item<double>();
  t.tolerance = 2 * t.low_error + kFloorEps * machine_eps(dtype) * t.magnitude * floor_growth;
  return t;
}

std::string exception_first_line(const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10e ? c10e->what_without_backtrace() : e.what();
  s = s.substr(0, s.find('\n'));
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

std::string worst_of(const std::vector<TensorCheck>& tensors) {
  const TensorCheck* worst = nullptr;
  for (const auto& t : tensors) {
    if (!t.ok()) {
      worst = &t;
      break;
    }
    if (!worst || t.error * worst->tolerance > worst->error * t.tolerance) worst = &t;
  }
  if (!worst) return "nothing compared";
  return worst->name + " max error " + sci(worst->error) + (worst->ok() ? " <= " : " > ") + "tolerance " +
         sci(worst->tolerance);
}

}  // namespace dflash::ops
