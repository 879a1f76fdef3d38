// The DSpark drafter as a Proposer (docs/DSPARK.md "Evaluation"): the block
// [last, MASK x (B-1)] runs through the DFlash backbone once (same context cache), and all B outputs are drafts:
// left to right, slot j's logits are the target LM head's U_j plus the Markov head's bias from the previous token
// (p_0 = last, p_j = d_{j-1}; the rnn state carried along), and d_j is their argmax (temperature 0) or a draw from
// softmax(l_j / T), whose distribution goes with the draft into the rejection rule. The target verifies B + 1
// tokens. With a confidence threshold X > 0 the draft stops before the first slot where the cumulative product
// of sigmoid(confidence) falls below X.
#pragma once
#include <vector>

#include "dflash_proposer.h"
#include "dspark_heads.h"

namespace dflash::eval {

// Drafts kept under the cumulative confidence rule: the number of leading slots j with
// prod_{i<=j} sigmoid(confidence_logits[i]) >= threshold; all of them when threshold <= 0 (off).
int64_t confident_draft_length(const std::vector<double>& confidence_logits, double threshold);

class DSparkProposer : public DFlashProposer {
 public:
  // max_draft > 0: only the first max_draft slots are drafted. confidence_threshold > 0 needs the confidence head.
  DSparkProposer(const LoadedDrafter& d, const models::TargetModel& target, int64_t max_draft = 0,
                 ops::AttentionBackend attention = ops::AttentionBackend::Fused, double confidence_threshold = 0);
  int64_t block_size() const override { return d_.config.block_size + 1; }
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;  // greedy drafts
  Draft draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) override;

 private:
  drafter::DSparkHeadWeights heads_;  // float32 on the drafter's device
  double confidence_threshold_ = 0;
};

}  // namespace dflash::eval
