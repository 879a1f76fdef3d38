#include "rope.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace dflash::models {

at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(rope.theta, exponent);
  if (!rope.freq_divisors.empty()) {
    if (static_cast<int64_t>(rope.freq_divisors.size()) != head_dim / 2)
      throw std::invalid_argument("rope: " + std::to_string(rope.freq_divisors.size()) +
                                  " frequency divisors, expected head_dim / 2 = " + std::to_string(head_dim / 2));
    inv_freq = inv_freq / at::tensor(rope.freq_divisors, at::kDouble).to(at::kFloat);
  }
  if (rope.type != "llama3") return inv_freq;
  // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend smoothly in between.
  const double old_len = static_cast<double>(rope.original_max_position_embeddings);
  const double low_wavelen = old_len / rope.low_freq_factor;
  const double high_wavelen = old_len / rope.high_freq_factor;
  at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq);
  at::Tensor smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
  at::Tensor medium = at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, int64_t start, int64_t T) {
  return rope_cos_sin_at(inv_freq, at::arange(start, start + T, at::kLong));
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin_at(const at::Tensor& inv_freq, const at::Tensor& positions) {
  at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq);
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
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
