#include "selector_metrics.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace dflash::drafter {

SelectorBlockMetrics selector_block_metrics(const SelectorWeights& w, const at::Tensor& hidden,
                                            const at::Tensor& lm_head, const at::Tensor& anchors,
                                            const at::Tensor& targets, const at::Tensor& mask, int64_t top_k,
                                            const UnaryLogitOptions& opt, int64_t vocab_chunk) {
  if (hidden.dim() != 3 || hidden.size(1) < 2 || targets.sizes() != hidden.sizes().slice(0, 2) ||
      mask.sizes() != targets.sizes() || anchors.sizes() != at::IntArrayRef({hidden.size(0)}))
    throw std::invalid_argument("selector metrics: need hidden [N, B, d] with B >= 2, targets and mask [N, B], anchors [N]");
  at::NoGradGuard no_grad;
  const int64_t B = hidden.size(1);
  return selector_block_metrics(w, hidden, top_candidates(hidden.narrow(1, 1, B - 1), lm_head, top_k, opt, vocab_chunk),
                                anchors, targets, mask);
}

SelectorBlockMetrics selector_block_metrics(const SelectorWeights& w, const at::Tensor& hidden,
                                            const Candidates& c, const at::Tensor& anchors,
                                            const at::Tensor& targets, const at::Tensor& mask) {
  at::NoGradGuard no_grad;
  const int64_t B = hidden.size(1);
  const at::Tensor drafted = hidden.narrow(1, 1, B - 1).detach();
  const at::Tensor y = targets.narrow(1, 1, B - 1).to(at::kLong);
  const at::Tensor m = mask.narrow(1, 1, B - 1).to(at::kBool);
  const SelectorWalk walk = selector_walk(w, c, drafted, anchors);

  const at::Tensor valid = m.any(-1);
  auto length_sum = [&](const at::Tensor& alive) {
    const at::Tensor len = 1 + (alive & m).to(at::kDouble).cumprod(-1).sum(-1);
    return (len * valid.to(at::kDouble)).sum();
  };
  SelectorBlockMetrics r;
  r.blocks = valid.to(at::kDouble).sum();
  r.path_length_sum = length_sum(walk.path.eq(y));
  r.oracle_length_sum = length_sum(c.ids.eq(y.unsqueeze(-1)).any(-1));
  r.unary_length_sum = length_sum(c.ids.select(-1, 0).eq(y));  // sorted by U, ties to the lower id: the argmax
  return r;
}

}  // namespace dflash::drafter
