#include "rejection_rule.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dflash::eval {

namespace {
void check_token(const std::vector<double>& p, const std::vector<double>& q, int64_t token, const char* what) {
  if (p.size() != q.size())
    throw std::invalid_argument(std::string(what) + ": target and draft distributions differ in size (" +
                                std::to_string(p.size()) + " vs " + std::to_string(q.size()) + ")");
  if (token < 0 || token >= static_cast<int64_t>(p.size()))
    throw std::invalid_argument(std::string(what) + ": token " + std::to_string(token) + " outside the vocabulary");
}
}  // namespace

double acceptance_probability(const std::vector<double>& p, const std::vector<double>& q, int64_t token) {
  check_token(p, q, token, "acceptance_probability");
  const double px = p[static_cast<size_t>(token)], qx = q[static_cast<size_t>(token)];
  return qx > 0 ? std::min(1.0, px / qx) : 1.0;
}

std::vector<double> residual_distribution(const std::vector<double>& p, const std::vector<double>& q) {
  if (p.size() != q.size()) throw std::invalid_argument("residual_distribution: p and q differ in size");
  std::vector<double> r(p.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0, p[i] - q[i]);
    total += r[i];
  }
  if (!(total > 0)) return p;
  for (double& x : r) x /= total;
  return r;
}

int64_t sample_with_uniform(const std::vector<double>& probs, double u) {
  int64_t count = 0, last_positive = -1;
  double cdf = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cdf += probs[i];
    if (cdf <= u) ++count;
    if (probs[i] > 0) last_positive = static_cast<int64_t>(i);
  }
  if (last_positive < 0) throw std::invalid_argument("sample_with_uniform: no token has positive probability");
  return std::min(count, last_positive);
}

BlockVerdict verify_block(const std::vector<std::vector<double>>& target_probs,
                          const std::vector<std::vector<double>>& draft_probs,
                          const std::vector<int64_t>& draft_tokens, const std::vector<double>& uniforms,
                          double extra_uniform) {
  const size_t n = draft_tokens.size();
  if (draft_probs.size() != n || uniforms.size() != n || target_probs.size() != n + 1)
    throw std::invalid_argument("verify_block: expected n + 1 target rows and n draft rows, tokens and uniforms for n = " +
                                std::to_string(n));
  for (size_t j = 0; j < n; ++j)
    if (!(uniforms[j] < acceptance_probability(target_probs[j], draft_probs[j], draft_tokens[j])))
      return {static_cast<int64_t>(j),
              sample_with_uniform(residual_distribution(target_probs[j], draft_probs[j]), extra_uniform)};
  return {static_cast<int64_t>(n), sample_with_uniform(target_probs[n], extra_uniform)};
}

}  // namespace dflash::eval
