#include "simple_proposers.h"

namespace dflash::eval {

std::vector<int64_t> OracleProposer::propose(int64_t last_token, int64_t pos) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k < B_; ++k) {
    const int64_t p = pos + k;
    // Past the reference (or off it after a sampled divergence) anything goes; repeat the last token.
    out.push_back(p < static_cast<int64_t>(ref_.size()) ? ref_[static_cast<size_t>(p)] : last_token);
  }
  return out;
}

std::vector<int64_t> RandomProposer::propose(int64_t, int64_t) {
  std::uniform_int_distribution<int64_t> d(0, V_ - 1);
  std::vector<int64_t> out;
  for (int64_t k = 1; k < B_; ++k) out.push_back(d(rng_));
  return out;
}

}  // namespace dflash::eval
