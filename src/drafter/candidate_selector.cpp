#include "candidate_selector.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "row_top_k.h"

namespace dflash::drafter {

namespace {

// Rows of the [rows, K, d] gather of head rows that candidate_unary_logits materialises at once (~32 MiB in fp64).
constexpr int64_t kGatherElements = int64_t(1) << 22;

at::Tensor apply_unary(const at::Tensor& raw, const UnaryLogitOptions& opt) {
  return ops::unary_logits(raw, opt.output_multiplier, opt.final_logit_softcapping);
}

void check_head(const at::Tensor& hidden, const at::Tensor& lm_head, const char* where) {
  if (!lm_head.defined() || lm_head.dim() != 2 || !hidden.defined() || hidden.dim() < 1 ||
      hidden.size(-1) != lm_head.size(1))
    throw std::invalid_argument(std::string(where) + ": need hidden [..., d] and lm_head [V, d] with the same d");
  if (hidden.scalar_type() != lm_head.scalar_type())
    throw std::invalid_argument(std::string(where) + ": hidden and lm_head must have the same dtype");
}

// sort along the last dim, largest first, equal values keeping their order (= ascending id here).
std::pair<at::Tensor, at::Tensor> sort_desc_stable(const at::Tensor& x) {
  auto [v, i] = at::sort(x, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  return {v, i};
}

// A chunk's top `take` by descending value, equal values by ascending id, without sorting the chunk. The take-th
// largest value t (topk's, whichever ids topk kept for it) splits each row into the values above t, all kept, and
// the values equal to t, whose lowest ids fill the remaining places. A second topk over distinct keys (above t:
// 2L - id, equal to t: L - id, below: -1) picks exactly that set, largest key first: the ones above t by ascending
// id, then the ones equal to t by ascending id. A stable sort of those `take` values by value then gives ties to
// the lower id. (Ties at t are common in bf16; a whole-chunk stable sort cost 20x the topk.)
std::pair<at::Tensor, at::Tensor> chunk_top_k(const at::Tensor& logits, int64_t take) {
  const int64_t L = logits.size(-1);
  const at::Tensor t = std::get<0>(at::topk(logits, take, -1, /*largest=*/true, /*sorted=*/true)).narrow(-1, take - 1, 1);
  const auto key_opts = logits.options().dtype(at::kFloat);  // ids exact below 2^24
  const at::Tensor id = at::arange(L, key_opts);
  const at::Tensor key = at::where(logits > t, 2.0 * double(L) - id,
                                   at::where(logits == t, double(L) - id, at::full({}, -1.0, key_opts)));
  const at::Tensor k = std::get<0>(at::topk(key, take, -1, /*largest=*/true, /*sorted=*/true));
  const at::Tensor ids = at::where(k > double(L), 2.0 * double(L) - k, double(L) - k).to(at::kLong);
  auto [v, order] = sort_desc_stable(logits.gather(-1, ids));
  return {v, ids.gather(-1, order)};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// How many rows' [K, d] head slices one gather may hold (kGatherElements bounds the temporary).
int64_t rows_per_gather(int64_t K, int64_t d) { return std::max<int64_t>(1, kGatherElements / std::max<int64_t>(1, K * d)); }

// lm_head rows at ids[r .. r + len): [len, K, d].
at::Tensor gathered_head_rows(const at::Tensor& lm_head, const at::Tensor& ids, int64_t r, int64_t len) {
  return lm_head.index_select(0, ids.narrow(0, r, len).reshape({-1})).view({len, ids.size(1), lm_head.size(1)});
}

// raw[r, k] = <hidden[r], lm_head[ids[r, k]]>, a bounded number of rows at a time; grad only for hidden.
class GatheredHeadLogits : public torch::autograd::Function<GatheredHeadLogits> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& lm_head,
                            const at::Tensor& ids) {
    const int64_t n = hidden.size(0), K = ids.size(1), d = hidden.size(1);
    const int64_t step = rows_per_gather(K, d);
    at::Tensor out = at::empty({n, K}, hidden.options());
    for (int64_t r = 0; r < n; r += step) {
      const int64_t len = std::min(step, n - r);
      const at::Tensor rows = gathered_head_rows(lm_head, ids, r, len);
      out.narrow(0, r, len).copy_(at::bmm(rows, hidden.narrow(0, r, len).unsqueeze(-1)).squeeze(-1));
    }
    ctx->save_for_backward({lm_head, ids});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &lm_head = saved[0], &ids = saved[1], &g = grads[0];
    const int64_t n = ids.size(0), K = ids.size(1), d = lm_head.size(1);
    const int64_t step = rows_per_gather(K, d);
    at::Tensor grad_h = at::empty({n, d}, g.options());
    for (int64_t r = 0; r < n; r += step) {
      const int64_t len = std::min(step, n - r);
      const at::Tensor rows = gathered_head_rows(lm_head, ids, r, len);
      grad_h.narrow(0, r, len).copy_(at::bmm(g.narrow(0, r, len).unsqueeze(1), rows).squeeze(1));
    }
    return {grad_h, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Candidates top_candidates(const at::Tensor& hidden, const at::Tensor& lm_head, int64_t top_k,
                          const UnaryLogitOptions& opt, int64_t vocab_chunk) {
  check_head(hidden, lm_head, "selector top-K");
  const int64_t V = lm_head.size(0), d = hidden.size(-1);
  if (top_k < 1 || top_k > V)
    throw std::invalid_argument("selector top-K: selector_top_k must be in [1, " + std::to_string(V) + "], got " +
                                std::to_string(top_k));
  if (vocab_chunk < 1) throw std::invalid_argument("selector top-K: vocabulary chunk must be >= 1");
  at::NoGradGuard no_grad;
  const at::Tensor h = hidden.reshape({-1, d});
  at::Tensor best_v, best_i;
  for (int64_t start = 0; start < V; start += vocab_chunk) {
    const int64_t len = std::min(vocab_chunk, V - start);
    const at::Tensor logits = apply_unary(at::linear(h, lm_head.narrow(0, start, len)), opt);
    const int64_t take = std::min(top_k, len);
    auto [v, i] = chunk_top_k(logits, take);
    i = i + start;
    if (best_v.defined()) {
      // Kept ids all precede this chunk's, so the stable sort still breaks ties by ascending id.
      const at::Tensor all_v = at::cat({best_v, v}, -1), all_i = at::cat({best_i, i}, -1);
      auto [mv, order] = sort_desc_stable(all_v);
      const int64_t keep = std::min(top_k, all_v.size(-1));
      v = mv.narrow(-1, 0, keep);
      i = all_i.gather(-1, order.narrow(-1, 0, keep));
    }
    best_v = v;
    best_i = i;
  }
  std::vector<int64_t> shape(hidden.sizes().begin(), hidden.sizes().end() - 1);
  shape.push_back(top_k);
  return {best_i.reshape(shape), best_v.reshape(shape)};
}

at::Tensor candidate_unary_logits(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& ids,
                                  const UnaryLogitOptions& opt) {
  check_head(hidden, lm_head, "selector candidate logits");
  if (lm_head.requires_grad())
    throw std::invalid_argument("selector candidate logits: the LM head is frozen; pass it without requires_grad");
  if (ids.dim() != hidden.dim() || ids.sizes().slice(0, ids.dim() - 1) != hidden.sizes().slice(0, hidden.dim() - 1))
    throw std::invalid_argument("selector candidate logits: ids must be [..., K] over the rows of hidden [..., d]");
  const int64_t d = hidden.size(-1), K = ids.size(-1);
  const at::Tensor raw = GatheredHeadLogits::apply(hidden.reshape({-1, d}), lm_head, ids.reshape({-1, K}).to(at::kLong));
  return apply_unary(raw.view(ids.sizes()), opt);
}

at::Tensor selector_scores(const SelectorWeights& w, const at::Tensor& unary_at_ids, const at::Tensor& hidden,
                           const at::Tensor& predecessors, const at::Tensor& ids) {
  const at::Tensor gate = at::embedding(w.predecessor_codebook, predecessors) * at::linear(hidden, w.hidden_projection);
  const at::Tensor succ = at::embedding(w.successor_codebook, ids);                                     // [..., K, r]
  return unary_at_ids + at::matmul(succ, gate.unsqueeze(-1)).squeeze(-1);
}

SelectorWalk selector_walk(const SelectorWeights& w, const Candidates& cands, const at::Tensor& hidden,
                           const at::Tensor& anchors, double temperature, const at::Tensor& uniforms) {
  if (cands.ids.dim() != 3 || hidden.dim() != 3 || hidden.sizes().slice(0, 2) != cands.ids.sizes().slice(0, 2) ||
      cands.logits.sizes() != cands.ids.sizes() || anchors.dim() != 1 || anchors.size(0) != cands.ids.size(0))
    throw std::invalid_argument("selector walk: need candidates [n, L, K], hidden [n, L, d] and anchors [n]");
  const int64_t n = cands.ids.size(0), L = cands.ids.size(1), K = cands.ids.size(2);
  const bool greedy = temperature <= 0;
  if (!greedy && (!uniforms.defined() || uniforms.sizes() != at::IntArrayRef({n, L})))
    throw std::invalid_argument("selector walk: sampling at temperature > 0 needs uniforms [n, L]");
  at::NoGradGuard no_grad;

  // Predecessor candidates of slot k: the anchor for the first slot, slot k-1's candidates after it.
  at::Tensor pred = anchors.to(at::kLong).view({n, 1, 1}).expand({n, 1, K});
  if (L > 1) pred = at::cat({pred, cands.ids.narrow(1, 0, L - 1)}, 1);                               // [n, L, K]
  const at::Tensor gate = at::embedding(w.predecessor_codebook, pred) *
                          at::linear(hidden, w.hidden_projection).unsqueeze(-2);                  // [n, L, Kp, r]
  const at::Tensor succ = at::embedding(w.successor_codebook, cands.ids);                          // [n, L, K, r]
  const at::Tensor lattice = cands.logits.unsqueeze(-2) + at::matmul(gate, succ.transpose(-1, -2));  // [n, L, Kp, K]

  SelectorWalk out;
  out.candidates = cands.ids;
  out.path = at::empty({n, L}, cands.ids.options());
  out.q = at::zeros({n, L, K}, lattice.options());
  out.scores = at::empty({n, L, K}, lattice.options());
  at::Tensor prev = at::zeros({n}, cands.ids.options().dtype(at::kLong));  // the predecessor's index into Kp
  for (int64_t k = 0; k < L; ++k) {
    const at::Tensor s = lattice.select(1, k).gather(1, prev.view({n, 1, 1}).expand({n, 1, K})).squeeze(1);
    at::Tensor pick;
    if (greedy) {
      pick = s.argmax(-1);
      out.q.select(1, k).scatter_(1, pick.unsqueeze(1), 1.0);
    } else {
      const at::Tensor q = at::softmax(s / temperature, -1);
      // Inverse CDF; rounding can leave the last cumulative sum below u: never pick a zero-probability tail.
      const at::Tensor below = (q.cumsum(-1) <= uniforms.select(1, k).to(q.scalar_type()).unsqueeze(1)).sum(-1);
      const at::Tensor last = (q > 0).to(at::kLong).cumsum(-1).argmax(-1);
      pick = at::minimum(below, last);
      out.q.select(1, k).copy_(q);
    }
    out.scores.select(1, k).copy_(s);
    out.path.select(1, k).copy_(cands.ids.select(1, k).gather(1, pick.unsqueeze(1)).squeeze(1));
    prev = pick;
  }
  return out;
}

SelectorLossTerms selector_loss_terms(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const at::Tensor& predecessors, const at::Tensor& targets,
                                      const at::Tensor& weights, const SelectorLossOptions& opt) {
  check_head(hidden, lm_head, "selector loss");
  if (hidden.dim() != 2)
    throw std::invalid_argument("selector loss: need hidden [n, d] and predecessors, targets, weights [n]");
  return selector_loss_terms(w, hidden, lm_head, top_candidates(hidden.detach(), lm_head, opt.top_k, opt.unary,
                                                                opt.vocab_chunk),
                             predecessors, targets, weights, opt);
}

SelectorLossTerms selector_loss_terms(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                      const Candidates& strict, const at::Tensor& predecessors,
                                      const at::Tensor& targets, const at::Tensor& weights,
                                      const SelectorLossOptions& opt) {
  check_head(hidden, lm_head, "selector loss");
  const int64_t n = hidden.size(0), V = lm_head.size(0), K = opt.top_k;
  if (hidden.dim() != 2 || predecessors.sizes() != at::IntArrayRef({n}) || targets.sizes() != at::IntArrayRef({n}) ||
      weights.sizes() != at::IntArrayRef({n}) || strict.ids.sizes() != at::IntArrayRef({n, K}))
    throw std::invalid_argument("selector loss: need hidden [n, d], predecessors, targets, weights [n] and candidates "
                                "[n, top_k]");
  const at::Tensor counted = weights > 0;
  // Rows of weight 0 may hold any label (past the sequence's end): they are read as token 0 and weigh nothing.
  const at::Tensor y = at::where(counted, targets.to(at::kLong), 0);
  const at::Tensor p = at::where(counted, predecessors.to(at::kLong), 0);
  if (n > 0) {
    at::NoGradGuard no_grad;
    const std::string bad = "selector loss: token ids must be in [0, " + std::to_string(V) + ")";
    const at::Tensor ok = (at::minimum(y.min(), p.min()) >= 0) & (at::maximum(y.max(), p.max()) < V);
    if (ok.is_cpu()) {
      if (!ok.item<bool>()) throw std::invalid_argument(bad);
    } else {
      at::_assert_async(ok, bad);  // no host sync on an accelerator: a device-side assert
    }
  }
  at::Tensor h = opt.stop_gradient ? hidden.detach() : hidden;
  const at::Tensor hit = strict.ids.eq(y.unsqueeze(1));
  const at::Tensor inside = hit.any(1);
  const at::Tensor strict_index = hit.to(at::kLong).argmax(1);
  at::Tensor ids = strict.ids, index = strict_index, covered = inside;
  if (opt.candidates == SelectorCandidates::Inject) {
    ids = strict.ids.clone();
    ids.select(1, K - 1).copy_(at::where(inside, strict.ids.select(1, K - 1), y));
    index = at::where(inside, strict_index, at::full_like(strict_index, K - 1));
    covered = at::ones_like(inside);
  }
  at::Tensor s = selector_scores(w, candidate_unary_logits(h, lm_head, ids, opt.unary), h, p, ids);
  if (s.scalar_type() != at::kDouble) s = s.to(at::kFloat);  // the K-way softmax and the sums in fp32 at least
  const at::Tensor ce = at::logsumexp(s, -1) - s.gather(1, index.unsqueeze(1)).squeeze(1);
  const at::Tensor wt = at::where(counted, weights, 0).to(s.scalar_type());
  const at::Tensor wm = wt * covered.to(s.scalar_type());

  SelectorLossTerms t;
  t.ce_sum = (wm * ce).sum();
  t.covered_weight = wm.sum();
  t.weight = wt.sum();
  t.rows = counted.to(s.scalar_type()).sum();
  // Inside rows score the strict top-K under both modes, so one argmax gives the teacher-forced accuracy.
  const at::Tensor picked = s.detach().argmax(1).eq(index) & inside & counted;
  t.recall_hits = (inside & counted).to(s.scalar_type()).sum();
  t.selector_hits = picked.to(s.scalar_type()).sum();
  return t;
}

at::Tensor selector_loss(const SelectorLossTerms& t) {
  // The selector's CE sum over the unary loss's weight (SpecForge's normalisation): the term adds to the unary
  // numerator, so a step's loss is the same however it is split into micro-batches. No weight at all is 0 with
  // gradient 0. The divisor of that case is 1, not a tiny clamp: 1/FLT_MIN times the trainer's loss scale
  // overflows fp32, and 0 weight times that inf made the whole gradient NaN. where() passes 0 to the division's
  // backward there, so no inf or 0/0 is ever formed.
  const at::Tensor some = t.weight > 0;
  return at::where(some, t.ce_sum / at::where(some, t.weight, at::ones_like(t.weight)), at::zeros_like(t.ce_sum));
}

}  // namespace dflash::drafter
