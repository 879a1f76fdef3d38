// Gradient check for the fp64 tests: autograd against central finite differences of a scalar function, element
// by element (tiny shapes only: two forwards per element).
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

// Checks d f / d inputs[i] for every i in `wrt` (all inputs when empty). Inputs must be fp64 leaves.
inline void expect_gradients_match(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                                   std::vector<at::Tensor> inputs, std::vector<size_t> wrt = {},
                                   double eps = 1e-6, double tol = 1e-7) {
  if (wrt.empty())
    for (size_t i = 0; i < inputs.size(); ++i) wrt.push_back(i);
  for (size_t i : wrt) inputs[i] = inputs[i].detach().clone().requires_grad_(true);
  std::vector<at::Tensor> leaves;
  for (size_t i : wrt) leaves.push_back(inputs[i]);
  const auto grads = torch::autograd::grad({f(inputs)}, leaves, {}, false, false, /*allow_unused=*/true);
  at::NoGradGuard no_grad;
  for (size_t j = 0; j < wrt.size(); ++j) {
    at::Tensor x = inputs[wrt[j]];
    const at::Tensor g = grads[j].defined() ? grads[j] : at::zeros_like(x);
    at::Tensor flat = x.view({-1});
    for (int64_t e = 0; e < flat.numel(); ++e) {
      const double keep = flat[e].item<double>();
      flat[e] = keep + eps;
      const double up = f(inputs).item<double>();
      flat[e] = keep - eps;
      const double down = f(inputs).item<double>();
      flat[e] = keep;
      const double numeric = (up - down) / (2 * eps), analytic = g.reshape({-1})[e].item<double>();
      ASSERT_NEAR(analytic, numeric, tol * std::max(1.0, std::abs(numeric)))
          << "input " << wrt[j] << " element " << e;
    }
  }
}

// The cheaper check for a costly f: the derivative along `directions` random directions per input, autograd
// <grad, dir> against a central difference of f along dir.
inline void expect_directional_gradients_match(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                                               std::vector<at::Tensor> inputs, int directions = 3,
                                               double eps = 1e-6, double tol = 1e-7) {
  for (auto& x : inputs) x = x.detach().clone().requires_grad_(true);
  const auto grads = torch::autograd::grad({f(inputs)}, inputs, {}, false, false, /*allow_unused=*/true);
  at::NoGradGuard no_grad;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const at::Tensor g = grads[j].defined() ? grads[j] : at::zeros_like(inputs[j]);
    const at::Tensor keep = inputs[j].clone();
    for (int k = 0; k < directions; ++k) {
      const at::Tensor dir = at::randn_like(keep);
      inputs[j].copy_(keep + eps * dir);
      const double up = f(inputs).item<double>();
      inputs[j].copy_(keep - eps * dir);
      const double down = f(inputs).item<double>();
      inputs[j].copy_(keep);
      const double numeric = (up - down) / (2 * eps), analytic = (g * dir).sum().item<double>();
      ASSERT_NEAR(analytic, numeric, tol * std::max(1.0, std::abs(numeric))) << "input " << j << " direction " << k;
    }
  }
}
