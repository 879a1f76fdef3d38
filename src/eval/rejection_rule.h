// The lossless rejection rule of speculative sampling with a dense draft distribution (the q a family's drafting
// hook samples its drafts from, drafter/family_drafting.h): draft x drawn from q is accepted with probability min(1, p(x)/q(x));
// the first rejection emits a draw from the residual norm(max(p - q, 0)); a block whose n drafts are all accepted
// emits a draw from the target's distribution after the last one. The emitted tokens are then distributed exactly
// as the target's own sampling. Torch-free; the uniforms are arguments so tests can replay fixed draws
// (tests/python/test_eval_rejection_rule.py against family_reference.py).
#pragma once
#include <cstdint>
#include <vector>

namespace dflash::eval {

// min(1, p[token] / q[token]); 1 when q[token] is 0 (a draft q could not have produced: never rejected by it).
double acceptance_probability(const std::vector<double>& p, const std::vector<double>& q, int64_t token);

// max(0, p - q) renormalised; p itself when that is all zero (then p == q and a rejection cannot happen).
std::vector<double> residual_distribution(const std::vector<double>& p, const std::vector<double>& q);

// Inverse-CDF draw with a given uniform u in [0, 1): the number of prefix sums <= u, never past the last token
// with positive probability (rounding can leave the total a hair below 1).
int64_t sample_with_uniform(const std::vector<double>& probs, double u);

struct BlockVerdict {
  int64_t accepted = 0;  // drafts accepted, 0..n
  int64_t token = -1;    // the extra token: the residual's draw at the first rejection, else the target's next
};

// One block: target_probs [n + 1][V] (the target at each draft position and after the last), draft_probs [n][V],
// draft_tokens [n], uniforms [n] (draft j is accepted when uniforms[j] < acceptance_probability) and the uniform of
// the extra token's draw.
BlockVerdict verify_block(const std::vector<std::vector<double>>& target_probs,
                          const std::vector<std::vector<double>>& draft_probs,
                          const std::vector<int64_t>& draft_tokens, const std::vector<double>& uniforms,
                          double extra_uniform);

}  // namespace dflash::eval
