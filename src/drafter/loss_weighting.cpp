#include "loss_weighting.h"

#include <algorithm>
#include <limits>

namespace dflash::drafter {

std::optional<LossDecay> loss_decay_from_text(const std::string& s) {
  if (s == "exp") return LossDecay::Exp;
  if (s == "none") return LossDecay::None;
  return std::nullopt;
}

const char* loss_decay_name(LossDecay d) { return d == LossDecay::None ? "none" : "exp"; }

double default_loss_gamma(int64_t block_size) {
  if (block_size == 16) return 7.0;
  if (block_size == 10) return 5.0;
  if (block_size == 8) return 4.0;
  return std::max(1.0, double(block_size) / 2.0);
}

double loss_gamma(double gamma, LossDecay decay, int64_t block_size) {
  if (decay == LossDecay::None) return std::numeric_limits<double>::infinity();
  return gamma > 0 ? gamma : default_loss_gamma(block_size);
}

}  // namespace dflash::drafter
