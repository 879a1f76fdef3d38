// DSpark's drafting of a speculative cycle (drafter/family_drafting.h; docs/DSPARK.md "Evaluation"): all B block
// outputs are drafts. Left to right, slot j's logits are the target LM head's U_j plus the Markov head's bias from
// the previous token (p_0 = last, p_j = d_{j-1}; the rnn state carried along), and d_j is their argmax
// (temperature 0) or a draw from softmax(l_j / T), whose distribution goes with the draft into the rejection rule.
// With a confidence threshold X > 0 the draft stops before the first slot where the cumulative product of
// sigmoid(confidence) falls below X.
#pragma once
#include <cstdint>
#include <vector>

namespace dflash::drafter {
class FamilyDrafting;
}  // namespace dflash::drafter

namespace dflash::families {

// Drafts kept under the cumulative confidence rule: the number of leading slots j with
// prod_{i<=j} sigmoid(confidence_logits[i]) >= threshold; all of them when threshold <= 0 (off).
int64_t confident_draft_length(const std::vector<double>& confidence_logits, double threshold);

// Registered through DSpark's model hooks (dspark_model_hooks.cpp).
const drafter::FamilyDrafting& dspark_drafting();

}  // namespace dflash::families
