// The tolerance rule the self-checks share (attention_selfcheck.h, loss_selfcheck.h): a fused kernel's result x
// against x64, the same computation in fp64 from the same rounded inputs, and against x_low, the plain
// (unfused) computation in the dtype itself:
//     max|x - x64| <= 2 * max|x_low - x64| + kFloorEps * eps(dtype) * max|x64| * floor_growth
// eps is the dtype's machine epsilon (bf16 2^-7, fp16 2^-10, fp32 2^-23, fp64 2^-52). This is the rule of
// flash-attention's tests; the floor covers results the low-precision computation happens to get exact.
#pragma once
#include <exception>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

constexpr double kFloorEps = 4.0;

struct TensorCheck {
  std::string name;        // out, dq, dk, dv; loss, dhidden
  double error = 0;        // max |fused - x64|
  double low_error = 0;    // max |x_low - x64|
  double magnitude = 0;    // max |x64|
  double tolerance = 0;    // the rule above
  bool ok() const { return error <= tolerance; }  // false for NaN
};

double machine_eps(at::ScalarType dtype);
// "fp32", "bf16", "fp16", "fp64"
std::string short_dtype_name(at::ScalarType dtype);

TensorCheck compare_to_exact(const std::string& name, const at::Tensor& fused, const at::Tensor& low,
                             const at::Tensor& exact, at::ScalarType dtype, double floor_growth = 1.0);

// The first line of what a check threw, without LibTorch's C++ backtrace, at most 300 characters: what the
// self-checks (and `dflash doctor`) report of an exception.
std::string exception_first_line(const std::exception& e);

// "dk max error 3.1e-01 > tolerance 2.4e-02" for the first failing tensor, else for the one closest to its
// tolerance ("... <= ...").
std::string worst_of(const std::vector<TensorCheck>& tensors);

}  // namespace dflash::ops
