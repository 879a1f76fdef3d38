#include "token_sampler.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace dflash::data {

std::mt19937_64 make_rng(uint64_t seed, uint64_t stream) {
  std::seed_seq s{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(stream),
                  static_cast<uint32_t>(stream >> 32), 0x5eedu};
  return std::mt19937_64(s);
}

std::vector<double> token_probs(const at::Tensor& logits_row, double temperature) {
  if (!(temperature > 0)) throw std::invalid_argument("token_probs: temperature must be > 0");
  const at::Tensor p = at::softmax(logits_row.reshape({-1}).to(at::kDouble) / temperature, 0).contiguous();
  const double* d = p.data_ptr<double>();
  return std::vector<double>(d, d + p.numel());
}

int64_t draw(const std::vector<double>& probs, std::mt19937_64& rng) {
  double total = 0;
  for (double x : probs) total += x;
  if (!(total > 0)) throw std::invalid_argument("draw: probabilities sum to zero");
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0;
  int64_t last_positive = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    acc += probs[i];
    last_positive = static_cast<int64_t>(i);
    if (u < acc) return last_positive;
  }
  return last_positive;  // rounding at the very top of the range
}

int64_t next_token(const at::Tensor& logits_row, double temperature, std::mt19937_64& rng) {
  if (temperature <= 0) return logits_row.reshape({-1}).argmax().item<int64_t>();
  return draw(token_probs(logits_row, temperature), rng);
}

}  // namespace dflash::data
