// DFlash2's drafting of a speculative cycle (drafter/family_drafting.h; docs/DFLASH2.md "Evaluation"): the drafted
// slots 1..n get unary logits U_k from the target's LM head and their top-K candidates; the candidate selector then
// walks a path: p_1 = last, slot k re-ranks its candidates by S_k(p_k, c) = U_k[c] + <A[p_k] * W_h h_k, Bc[c]>, and
// the pick becomes p_{k+1}. Temperature 0 picks the argmax; T > 0 draws from the sparse q_k = softmax(S_k(p_k, .) / T)
// over the K candidates (zero elsewhere), and that q goes with the draft into the rejection rule, so sampled
// decoding stays lossless. The target verifies B tokens, as for DFlash.
#pragma once
#include <cstdint>
#include <vector>

#include "candidate_selector.h"
#include "family_drafting.h"

namespace dflash::families {

// The top-K of unary logits [L, V] by descending logit, equal logits by ascending id (the order of training's
// drafter::top_candidates): ids [L, K] and the logits at them. Throws std::invalid_argument unless 1 <= K <= V.
drafter::Candidates unary_candidates(const at::Tensor& unary, int64_t top_k);

// The walk's drafts from the drafted slots' candidates cands [L, K] (ids by descending U, and U at them), their
// hidden states hidden [L, d] and the last committed token `anchor`: L tokens, and at T > 0 the dense q [V] of
// each (uniforms [L] in [0, 1) then drive the inverse-CDF draws; ignored at T = 0).
drafter::BlockDraft selector_path_draft(const drafter::SelectorWeights& w, const drafter::Candidates& cands,
                                        const at::Tensor& hidden, int64_t anchor, int64_t vocab_size,
                                        double temperature, const std::vector<double>& uniforms);

// Registered through DFlash2's model hooks (dflash2_model_hooks.cpp).
const drafter::FamilyDrafting& dflash2_drafting();

}  // namespace dflash::families
