// DFlash2's candidate selector (docs/DFLASH2.md): on top of the unary logits
// U = softcap(output_multiplier * lm_head(h)) it re-ranks each position's top-K candidates by the previous token:
//   S_k(p, c) = U_k[c] + < A[p] * (W_h h_k), Bc[c] >       A, Bc: predecessor / successor codebooks [V, r]
// At inference it walks a path through the candidates (greedy or sampled); in training it is a K-way CE with
// teacher-forced predecessors. The top-K is found one vocabulary chunk at a time: no [rows, V] tensor.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "selector_candidates.h"  // SelectorCandidates: inject | strict

namespace dflash::drafter {

// Checkpoint names: dflash2_weight_names.h.
struct SelectorWeights {
  at::Tensor hidden_projection;     // W_h [r, d] (a Linear weight)
  at::Tensor predecessor_codebook;  // A [V, r]
  at::Tensor successor_codebook;    // Bc [V, r]
};

// dflash_config's optional `output_multiplier` and `final_logit_softcapping` (<= 0: no cap).
struct UnaryLogitOptions {
  double output_multiplier = 1.0;
  double final_logit_softcapping = 0.0;
};

struct Candidates {
  at::Tensor ids;     // [..., K] int64, by descending U, equal logits by ascending id
  at::Tensor logits;  // [..., K] U at ids (no autograd)
};

// topK of U for hidden [..., d] through the frozen lm_head [V, d], vocab_chunk rows of the head at a time.
// Throws std::invalid_argument on bad shapes or K outside [1, V].
Candidates top_candidates(const at::Tensor& hidden, const at::Tensor& lm_head, int64_t top_k,
                          const UnaryLogitOptions& opt = {}, int64_t vocab_chunk = 8192);

// U at given ids [..., K] for hidden [..., d], differentiable with respect to hidden (the LM head is frozen: a head
// that requires grad is refused). Computed a few rows at a time; backward saves only ids (and the head).
at::Tensor candidate_unary_logits(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& ids,
                                  const UnaryLogitOptions& opt = {});

// S(p, c) for candidates ids [..., K] with their unary logits [..., K], hidden [..., d], predecessors [...].
at::Tensor selector_scores(const SelectorWeights& w, const at::Tensor& unary_at_ids, const at::Tensor& hidden,
                           const at::Tensor& predecessors, const at::Tensor& ids);

// ---- inference: the walk -------------------------------------------------------------------------------------

struct SelectorWalk {
  at::Tensor path;        // [n, L] chosen tokens
  at::Tensor candidates;  // [n, L, K]
  at::Tensor q;           // [n, L, K] the proposal over the candidates (one-hot at temperature 0)
  at::Tensor scores;      // [n, L, K] S_k(p_k, .) along the walked path
};

// The walk over the drafted slots of n blocks: cands [n, L, K] (top_candidates of hidden), hidden [n, L, d],
// anchors [n] (p_1). temperature <= 0: p_{k+1} = argmax_c S_k(p_k, c) (first on ties); otherwise an inverse-CDF
// draw from q_k = softmax(S_k(p_k, .)/T) with uniforms [n, L] in [0, 1). The K x K score lattice (predecessors =
// the previous slot's candidates) is computed in one batch; the walk itself only gathers from it.
SelectorWalk selector_walk(const SelectorWeights& w, const Candidates& cands, const at::Tensor& hidden,
                           const at::Tensor& anchors, double temperature = 0.0, const at::Tensor& uniforms = {});

// ---- training: the K-way CE with teacher-forced predecessors ---------------------------------------------------

struct SelectorLossOptions {
  int64_t top_k = 16;
  SelectorCandidates candidates = kDefaultSelectorCandidates;
  bool stop_gradient = false;  // U and h detached for this term (SpecForge #793); the selector weights still learn
  UnaryLogitOptions unary;
  int64_t vocab_chunk = 8192;
};

// Sums over the rows with weight > 0 (rows of weight 0 are computed with token 0 and add nothing: no row count
// depends on the data, so there is no host sync). The chunked loss adds them up
// chunk by chunk; L_sel = ce_sum / weight (selector_loss).
struct SelectorLossTerms {
  at::Tensor ce_sum;          // sum w m CE_K(S(p, C'), idx(y)): scalar, differentiable
  at::Tensor covered_weight;  // sum w m (m = 1 under Inject, [y in top-K] under Strict)
  at::Tensor weight;          // sum w (the unary loss's denominator: slot 0 weighs 0)
  at::Tensor rows;            // number of rows with w > 0
  at::Tensor recall_hits;     // of those, rows with y in the strict top-K (unary recall@K)
  at::Tensor selector_hits;   // rows where argmax over the strict top-K of S(gold predecessor, .) == y
};

// hidden [n, d] (final-normed), lm_head [V, d], predecessors / targets [n] int64, weights [n] (the unary loss's
// decay x mask). Throws std::invalid_argument on bad shapes or a target outside [0, V).
SelectorLossTerms selector_loss_terms(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& predecessors, const at::Tensor& targets,
                                      const at::Tensor& weights, const SelectorLossOptions& opt);
// The same with the strict top-K of hidden already found (top_candidates(hidden, lm_head, opt.top_k)), so that a
// caller that also measures the walk finds it once. Ids out of range: std::invalid_argument on the CPU, a device-side
// assert elsewhere (no host sync).
SelectorLossTerms selector_loss_terms(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const Candidates& strict, const at::Tensor& predecessors,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const SelectorLossOptions& opt);

// ce_sum / weight (SpecForge: the selector's numerator over the unary loss's sum w), 0 when nothing weighs.
at::Tensor selector_loss(const SelectorLossTerms& t);

}  // namespace dflash::drafter
