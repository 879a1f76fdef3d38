#include "rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace dflash::models {
namespace {

// transformers' yarn helpers (find_correction_dim / find_correction_range), in Python floats (double).
double correction_dim(double rotations, int64_t dim, double base, double length) {
  return (double(dim) * std::log(length / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

// 0.1 * m * ln(scale) + 1 for scale > 1, else 1 (YaRN's attention temperature).
double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

RopeFrequencies yarn(const RopeConfig& r, int64_t dim, int64_t max_positions, const at::Tensor& exponent,
                     at::ScalarType dtype) {
  const double factor = *r.factor;
  RopeFrequencies f;
  if (r.attention_factor) f.attention_scaling = *r.attention_factor;
  else if (r.mscale.value_or(0) != 0 && r.mscale_all_dim.value_or(0) != 0)
    f.attention_scaling = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
  else f.attention_scaling = yarn_mscale(factor, 1.0);
  // transformers reads `beta_fast or 32`, `beta_slow or 1`: 0 and null both mean the default.
  const double beta_fast = r.beta_fast.value_or(0) != 0 ? *r.beta_fast : 32.0;
  const double beta_slow = r.beta_slow.value_or(0) != 0 ? *r.beta_slow : 1.0;
  const double original = double(r.original_max_position_embeddings.value_or(max_positions));
  double low = correction_dim(beta_fast, dim, r.theta, original);
  double high = correction_dim(beta_slow, dim, r.theta, original);
  if (r.truncate.value_or(true)) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const at::Tensor pos_freqs = at::pow(r.theta, exponent);
  const at::Tensor extrapolation = 1.0 / pos_freqs;
  const at::Tensor interpolation = 1.0 / (factor * pos_freqs);
  // Extrapolate (keep) the high frequencies below `low`, interpolate (divide by factor) those above `high`.
  const at::Tensor ramp = ((at::arange(dim / 2, at::TensorOptions(dtype)) - low) / (high - low)).clamp(0, 1);
  const at::Tensor keep = 1 - ramp;
  f.inv_freq = interpolation * (1 - keep) + extrapolation * keep;
  return f;
}

at::Tensor llama3(const RopeConfig& r, const at::Tensor& inv_freq) {
  // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend smoothly in between.
  const double factor = *r.factor, low = *r.low_freq_factor, high = *r.high_freq_factor;
  const double old_len = double(*r.original_max_position_embeddings);
  // Python's `scalar / tensor` is tensor.reciprocal() * scalar (ATen's divides once): written as transformers
  // computes it, so float32 results agree bit for bit.
  const at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  const at::Tensor scaled = at::where(wavelen > old_len / low, inv_freq / factor, inv_freq);
  const at::Tensor smooth = (wavelen.reciprocal() * old_len - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium =
      at::logical_not(wavelen < old_len / high).logical_and(at::logical_not(wavelen > old_len / low));
  return at::where(medium, smoothed, scaled);
}

}  // namespace

RopeFrequencies rope_frequencies(const RopeConfig& r, int64_t dim, int64_t max_positions, int64_t seq_len,
                                 at::ScalarType dtype) {
  check_rope_config(r, max_positions);
  if (dim < 2 || dim % 2 != 0)
    throw RopeConfigError("rope: " + std::to_string(dim) + " rotated dims per head, expected an even number >= 2");
  const at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(dtype) / double(dim);
  RopeFrequencies f;
  if (r.type == "yarn") return yarn(r, dim, max_positions, exponent, dtype);
  if (r.type == "dynamic" && seq_len > max_positions) {
    if (dim == 2) throw RopeConfigError("rope_type \"dynamic\" needs more than 2 rotated dims per head");
    // NTK: the base grows with the length, in the dtype's arithmetic as transformers' forward computes it.
    const double factor = *r.factor;
    const at::Tensor grown = ((at::scalar_tensor(seq_len, at::kLong).to(dtype) * factor) / double(max_positions) -
                              (factor - 1))
                                 .pow(double(dim) / double(dim - 2)) *
                             r.theta;
    f.inv_freq = 1.0 / at::pow(grown, exponent);
    return f;
  }
  f.inv_freq = 1.0 / at::pow(r.theta, exponent);
  if (r.type == "linear") f.inv_freq = f.inv_freq / *r.factor;
  if (r.type == "llama3") f.inv_freq = llama3(r, f.inv_freq);
  if (!r.freq_divisors.empty()) {
    if (static_cast<int64_t>(r.freq_divisors.size()) != dim / 2)
      throw RopeConfigError("rope: " + std::to_string(r.freq_divisors.size()) +
                            " frequency divisors, expected rotated dims / 2 = " + std::to_string(dim / 2));
    f.inv_freq = f.inv_freq / at::tensor(r.freq_divisors, at::kDouble).to(dtype);
  }
  return f;
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const RopeFrequencies& f, int64_t start, int64_t T) {
  return rope_cos_sin_at(f, at::arange(start, start + T, at::kLong));
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin_at(const RopeFrequencies& f, const at::Tensor& positions) {
  const at::Tensor inv_freq = f.inv_freq.to(at::kFloat);
  at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq);
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  if (f.attention_scaling == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * f.attention_scaling, emb.sin() * f.attention_scaling};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rot = cos.size(-1);
  if (rot < x.size(-1))  // partial RoPE (Qwen3.5): rotate the first rot dims, pass the rest through
    return at::cat({apply_rope(x.narrow(-1, 0, rot), cos, sin), x.narrow(-1, rot, x.size(-1) - rot)}, -1);
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

}  // namespace dflash::models
