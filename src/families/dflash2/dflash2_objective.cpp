#include "dflash2_objective.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

namespace dflash::drafter {

DFlash2Stats dflash2_selector_objective(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const BlockBatch& blocks, int64_t block_size, const DFlash2LossOptions& opt,
                                        const Candidates& unary_top) {
  const int64_t B = block_size;
  if (B < 2 || hidden.dim() != 3 || hidden.size(1) % B != 0 || blocks.labels.sizes() != hidden.sizes().slice(0, 2) ||
      blocks.weights.sizes() != blocks.labels.sizes() || blocks.block_ids.sizes() != blocks.labels.sizes())
    throw std::invalid_argument("dflash2 objective: need hidden [b, N*B, d] and block labels, weights, ids [b, N*B]");
  const int64_t d = hidden.size(2), M = hidden.numel() / (d * B), K = opt.selector.top_k;
  const at::Tensor h = hidden.reshape({M, B, d});
  const at::Tensor labels = blocks.labels.reshape({M, B}).to(at::kLong);
  const at::Tensor weights = blocks.weights.reshape({M, B});
  const at::Tensor anchor_tokens = blocks.block_ids.reshape({M, B}).select(1, 0).to(at::kLong);
  // Teacher-forced predecessors of slots 1..B-1: the anchor, then the previous slot's label.
  const at::Tensor preds = at::cat({anchor_tokens.unsqueeze(1), labels.narrow(1, 1, B - 2)}, 1);  // [M, B-1]
  const at::Tensor y = labels.narrow(1, 1, B - 1), wt = weights.narrow(1, 1, B - 1);

  const bool given = unary_top.ids.defined();
  if (given && (unary_top.ids.dim() != 3 || unary_top.ids.sizes().slice(0, 2) != hidden.sizes().slice(0, 2) ||
                unary_top.ids.size(2) != K || unary_top.logits.sizes() != unary_top.ids.sizes()))
    throw std::invalid_argument("dflash2 objective: the given unary top-K must be [b, N*B, selector_top_k]");
  const Candidates top = given ? Candidates{unary_top.ids.reshape({M, B, K}), unary_top.logits.reshape({M, B, K})}
                               : Candidates{};
  const int64_t per_chunk = std::max<int64_t>(1, opt.chunk_rows / (B - 1));
  DFlash2Stats st;
  auto add = [](at::Tensor& acc, const at::Tensor& v) { acc = acc.defined() ? acc + v : v; };
  for (int64_t m0 = 0; m0 < M; m0 += per_chunk) {
    const int64_t nb = std::min(per_chunk, M - m0);
    const at::Tensor hb = h.narrow(0, m0, nb), drafted = hb.narrow(1, 1, B - 1);  // [nb, B-1, d]
    const Candidates c =
        given ? Candidates{top.ids.narrow(0, m0, nb).narrow(1, 1, B - 1), top.logits.narrow(0, m0, nb).narrow(1, 1, B - 1)}
              : top_candidates(drafted.detach(), lm_head, K, opt.selector.unary, opt.selector.vocab_chunk);
    const Candidates flat{c.ids.reshape({-1, K}), c.logits.reshape({-1, K})};
    const SelectorLossTerms t =
        selector_loss_terms(w, drafted.reshape({-1, d}), lm_head, flat, preds.narrow(0, m0, nb).reshape(-1),
                            y.narrow(0, m0, nb).reshape(-1), wt.narrow(0, m0, nb).reshape(-1), opt.selector);
    add(st.terms.ce_sum, t.ce_sum);
    add(st.terms.covered_weight, t.covered_weight);
    add(st.terms.weight, t.weight);
    add(st.terms.rows, t.rows);
    add(st.terms.recall_hits, t.recall_hits);
    add(st.terms.selector_hits, t.selector_hits);
    const SelectorBlockMetrics bm = selector_block_metrics(w, hb, c, anchor_tokens.narrow(0, m0, nb),
                                                           labels.narrow(0, m0, nb), weights.narrow(0, m0, nb) > 0);
    add(st.blocks.blocks, bm.blocks);
    add(st.blocks.path_length_sum, bm.path_length_sum);
    add(st.blocks.oracle_length_sum, bm.oracle_length_sum);
    add(st.blocks.unary_length_sum, bm.unary_length_sum);
  }
  if (M == 0) {  // nothing to draft: zero sums, and a loss that still reaches the selector's weights (grad 0)
    const auto z = at::zeros({}, hidden.options().dtype(hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
    st.terms = {z + 0 * w.successor_codebook.sum(), z, z, z, z, z};
    st.blocks = {z.to(at::kDouble), z.to(at::kDouble), z.to(at::kDouble), z.to(at::kDouble)};
  }
  st.selector_loss = selector_loss(st.terms);
  return st;
}

}  // namespace dflash::drafter
