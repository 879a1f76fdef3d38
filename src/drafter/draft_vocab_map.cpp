#include "draft_vocab_map.h"

#include <stdexcept>

#include <ATen/ATen.h>

namespace dflash::drafter {

at::Tensor draft_to_target_offsets(const at::Tensor& draft_ids) {
  return draft_ids - at::arange(draft_ids.size(0), draft_ids.options());
}

at::Tensor target_in_draft_mask(const at::Tensor& draft_ids, int64_t vocab) {
  at::Tensor m = at::zeros({vocab}, at::kBool);
  m.index_fill_(0, draft_ids.to(at::kCPU), true);
  return m;
}

at::Tensor target_to_draft_table(const at::Tensor& draft_ids, int64_t vocab) {
  at::Tensor t = at::full({vocab}, -1, at::kLong);
  t.index_copy_(0, draft_ids.to(at::kCPU), at::arange(draft_ids.size(0), at::kLong));
  return t;
}

at::Tensor draft_ids_from_offsets(const at::Tensor& d2t, const at::Tensor& t2d, int64_t vocab, const std::string& where) {
  if (d2t.dim() != 1 || d2t.size(0) < 1 || at::isFloatingType(d2t.scalar_type()) || d2t.scalar_type() == at::kBool)
    throw std::invalid_argument(where + ": 'd2t' must be an integer tensor [draft_vocab_size] (offsets: target id = "
                                "draft id + d2t[draft id]), got " + c10::str(d2t.scalar_type(), d2t.sizes()));
  const at::Tensor ids = d2t.to(at::kLong).cpu() + at::arange(d2t.size(0), at::kLong);
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= vocab)
    throw std::invalid_argument(where + ": 'd2t' maps draft ids outside the target vocabulary [0, " +
                                std::to_string(vocab) + ")");
  if (ids.size(0) > 1 && !(ids.narrow(0, 1, ids.size(0) - 1) > ids.narrow(0, 0, ids.size(0) - 1)).all().item<bool>())
    throw std::invalid_argument(where + ": 'd2t' must map draft ids to strictly ascending target ids");
  if (t2d.defined()) {
    if (t2d.dim() != 1 || t2d.size(0) != vocab)
      throw std::invalid_argument(where + ": 't2d' must be bool [" + std::to_string(vocab) + "] (the target vocabulary)");
    if (!t2d.to(at::kBool).cpu().equal(target_in_draft_mask(ids, vocab)))
      throw std::invalid_argument(where + ": 't2d' does not mark exactly the target ids that 'd2t' maps to");
  }
  return ids;
}

RestrictedLabels restrict_labels(const at::Tensor& labels, const at::Tensor& weights, const at::Tensor& table) {
  RestrictedLabels r;
  const at::Tensor flat = labels.reshape({-1});
  // Labels of weight-0 rows may be anything (padding): clamp before the lookup, they stay masked.
  const at::Tensor d = table.index_select(0, flat.clamp(0, table.size(0) - 1)).view(labels.sizes());
  const at::Tensor inside = d.ge(0);
  r.out_of_vocab = weights.gt(0).logical_and(inside.logical_not());
  r.weights = weights * inside.to(weights.scalar_type());
  r.labels = d.clamp_min(0);
  return r;
}

}  // namespace dflash::drafter
