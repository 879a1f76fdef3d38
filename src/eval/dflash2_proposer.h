// The DFlash2 drafter as a Proposer (docs/DFLASH2.md "Evaluation"): the block
// [last, MASK x (B-1)] runs once through the DFlash backbone with its block convolutions (same context cache);
// the drafted slots 1..n get unary logits U_k from the target's LM head and their top-K candidates; the candidate
// selector then walks a path: p_1 = last, slot k re-ranks its candidates by S_k(p_k, c) = U_k[c] +
// <A[p_k] * W_h h_k, Bc[c]>, and the pick becomes p_{k+1}. Temperature 0 picks the argmax; T > 0 draws from the
// sparse q_k = softmax(S_k(p_k, .) / T) over the K candidates (zero elsewhere), and that q goes with the draft into
// the rejection rule (rejection_rule.h), so sampled decoding stays lossless. The target verifies B tokens, as for
// DFlash.
#pragma once
#include <vector>

#include "candidate_selector.h"
#include "dflash_proposer.h"

namespace dflash::eval {

// The top-K of unary logits [L, V] by descending logit, equal logits by ascending id (the order of training's
// drafter::top_candidates): ids [L, K] and the logits at them. Throws std::invalid_argument unless 1 <= K <= V.
drafter::Candidates unary_candidates(const at::Tensor& unary, int64_t top_k);

// The walk's drafts from the drafted slots' candidates cands [L, K] (ids by descending U, and U at them), their
// hidden states hidden [L, d] and the last committed token `anchor`: L tokens, and at T > 0 the dense q [V] of
// each (uniforms [L] in [0, 1) then drive the inverse-CDF draws; ignored at T = 0).
Draft selector_path_draft(const drafter::SelectorWeights& w, const drafter::Candidates& cands, const at::Tensor& hidden,
                          int64_t anchor, int64_t vocab_size, double temperature, const std::vector<double>& uniforms);

class DFlash2Proposer : public DFlashProposer {
 public:
  // max_draft > 0: only slots 1..max_draft are drafted (and verified).
  DFlash2Proposer(const LoadedDrafter& d, const models::TargetModel& target, int64_t max_draft = 0,
                  ops::AttentionBackend attention = ops::AttentionBackend::Fused);
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;  // the greedy path
  // One uniform per drafted slot from rng at T > 0 (none at T = 0), then draft_with_uniforms.
  Draft draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) override;
  // The cycle's drafts with given uniforms (a test tool replays them against a reference walk).
  Draft draft_with_uniforms(int64_t last_token, int64_t pos, double temperature, const std::vector<double>& uniforms);
  // The final-normed hidden states [B, d] the cycle's walk reads (float32; for that test tool).
  at::Tensor cycle_hidden(int64_t last_token, int64_t pos) { return block_hidden(last_token, pos)[0]; }
  int64_t drafted_slots() const;  // n: B - 1, or max_draft when smaller

 private:
  drafter::SelectorWeights selector_;  // float32 on the drafter's device
};

}  // namespace dflash::eval
