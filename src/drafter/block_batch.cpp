#include "block_batch.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace dflash::drafter {

namespace {

// Draws min(n, valid.size()) of `valid` uniformly without replacement (a partial Fisher-Yates: the first `take`
// entries become the sample), sorted. Consumes exactly `take` draws of rng.
std::vector<int64_t> draw_sorted(std::vector<int64_t> valid, int64_t n, std::mt19937_64& rng) {
  const int64_t take = std::min<int64_t>(n, int64_t(valid.size()));
  for (int64_t i = 0; i < take; ++i) {
    std::uniform_int_distribution<int64_t> pick(i, int64_t(valid.size()) - 1);
    std::swap(valid[size_t(i)], valid[size_t(pick(rng))]);
  }
  valid.resize(size_t(take));
  std::sort(valid.begin(), valid.end());
  return valid;
}

}  // namespace

AnchorSample sample_anchors(const at::Tensor& loss_mask_in, int64_t num_anchors, std::mt19937_64& rng,
                            const at::Tensor& doc_start_in) {
  if (loss_mask_in.dim() != 2)
    throw std::invalid_argument("sample_anchors: loss_mask must be [batch, S], got " +
                                std::to_string(loss_mask_in.dim()) + " dims");
  if (num_anchors <= 0) throw std::invalid_argument("sample_anchors: num_anchors must be positive");
  const bool packed = doc_start_in.defined();
  if (packed && doc_start_in.sizes() != loss_mask_in.sizes())
    throw std::invalid_argument("sample_anchors: doc_start must have the shape of loss_mask [batch, S]");
  const at::Tensor mask = loss_mask_in.to(at::kBool).contiguous().cpu();
  const at::Tensor doc = packed ? doc_start_in.to(at::kLong).contiguous().cpu() : at::Tensor();
  const int64_t batch = mask.size(0), S = mask.size(1);
  const bool* m = mask.data_ptr<bool>();
  const int64_t* ds = packed ? doc.data_ptr<int64_t>() : nullptr;
  // Per row, the sorted anchors of each of its documents (one document per row when not packed).
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t p0 = 0; p0 < S;) {
      int64_t p1 = p0 + 1;  // the document [p0, p1)
      if (packed)
        while (p1 < S && ds[b * S + p1] == ds[b * S + p0]) ++p1;
      else
        p1 = S;
      std::vector<int64_t> valid;
      for (int64_t p = p0; p + 1 < p1; ++p)
        if (m[b * S + p] && m[b * S + p + 1]) valid.push_back(p);
      const auto got = draw_sorted(std::move(valid), num_anchors, rng);
      rows[size_t(b)].insert(rows[size_t(b)].end(), got.begin(), got.end());
      p0 = p1;
    }
  }
  int64_t N = num_anchors;
  if (packed) {
    N = 1;
    for (const auto& r : rows) N = std::max<int64_t>(N, int64_t(r.size()));
  }
  at::Tensor anchors = at::zeros({batch, N}, at::kLong);
  at::Tensor keep = at::zeros({batch, N}, at::kBool);
  at::Tensor starts = packed ? at::zeros({batch, N}, at::kLong) : at::Tensor();
  int64_t* a = anchors.data_ptr<int64_t>();
  bool* k = keep.data_ptr<bool>();
  for (int64_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < rows[size_t(b)].size(); ++i) {
      a[b * N + int64_t(i)] = rows[size_t(b)][i];
      k[b * N + int64_t(i)] = true;
      if (packed) starts.data_ptr<int64_t>()[b * N + int64_t(i)] = ds[b * S + rows[size_t(b)][i]];
    }
  const auto dev = loss_mask_in.device();
  AnchorSample out{anchors.to(dev), keep.to(dev), {}, {}};
  if (packed) {
    out.doc_start = doc.to(dev);
    out.ctx_start = starts.to(dev);
  }
  return out;
}

at::Tensor slot_decay_weights(int64_t block_size, double gamma) {
  if (!(gamma > 0)) throw std::invalid_argument("loss gamma must be positive, got " + std::to_string(gamma));
  at::Tensor w = at::zeros({block_size}, at::kDouble);
  for (int64_t k = 1; k < block_size; ++k) w[k] = std::exp(-double(k - 1) / gamma);
  return w;
}

BlockBatch build_block_batch(const at::Tensor& input_ids, const at::Tensor& loss_mask, const AnchorSample& s,
                             int64_t B, int64_t mask_token_id, double gamma) {
  if (input_ids.dim() != 2 || loss_mask.sizes() != input_ids.sizes())
    throw std::invalid_argument("build_block_batch: input_ids and loss_mask must both be [batch, S]");
  if (s.anchors.dim() != 2 || s.anchors.size(0) != input_ids.size(0) || s.keep.sizes() != s.anchors.sizes())
    throw std::invalid_argument("build_block_batch: anchors/keep must be [batch, N] with the batch of input_ids");
  const int64_t batch = input_ids.size(0), S = input_ids.size(1), N = s.anchors.size(1);
  const auto dev = input_ids.device();
  const at::Tensor slot = at::arange(B, at::TensorOptions().dtype(at::kLong).device(dev));
  const at::Tensor pos = (s.anchors.unsqueeze(-1) + slot).reshape({batch, N * B});  // a + k
  const at::Tensor inside = pos < S;
  const at::Tensor pos_c = pos.clamp_max(S - 1);
  const at::Tensor labels = at::gather(input_ids, 1, pos_c).masked_fill(inside.logical_not(), 0);
  const at::Tensor anchor_tok = at::gather(input_ids, 1, s.anchors.clamp(0, S - 1));  // [b, N]
  at::Tensor block_ids = at::full({batch, N, B}, mask_token_id, input_ids.options().dtype(at::kLong));
  block_ids.select(2, 0).copy_(anchor_tok);
  const at::Tensor lm = at::gather(loss_mask.to(at::kDouble), 1, pos_c);
  const at::Tensor keep_rows = s.keep.to(at::kDouble).unsqueeze(-1).expand({batch, N, B}).reshape({batch, N * B});
  const at::Tensor decay = slot_decay_weights(B, gamma).to(dev).repeat({N}).unsqueeze(0);
  at::Tensor weights = decay * keep_rows * lm * inside.to(at::kDouble);
  if (s.doc_start.defined()) {  // packed rows: a label in the next document is not this block's
    const at::Tensor doc_of_label = at::gather(s.doc_start, 1, pos_c);
    const at::Tensor doc_of_anchor = at::gather(s.doc_start, 1, s.anchors.clamp(0, S - 1));
    const at::Tensor same = doc_of_label.view({batch, N, B}).eq(doc_of_anchor.unsqueeze(-1)).reshape({batch, N * B});
    weights = weights * same.to(at::kDouble);
  }
  const at::Tensor teacher_pos = (pos - 1).clamp(0, S - 1);
  const at::Tensor base = at::arange(batch, slot.options()).mul_(S).unsqueeze(1);
  return {block_ids.reshape({batch, N * B}), labels, weights, teacher_pos + base};
}

}  // namespace dflash::drafter
