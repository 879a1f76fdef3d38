#include "block_batch.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace dflash::drafter {

AnchorSample sample_anchors(const at::Tensor& loss_mask_in, int64_t num_anchors, std::mt19937_64& rng) {
  if (loss_mask_in.dim() != 2)
    throw std::invalid_argument("sample_anchors: loss_mask must be [batch, S], got " +
                                std::to_string(loss_mask_in.dim()) + " dims");
  if (num_anchors <= 0) throw std::invalid_argument("sample_anchors: num_anchors must be positive");
  const at::Tensor mask = loss_mask_in.to(at::kBool).contiguous().cpu();
  const int64_t batch = mask.size(0), S = mask.size(1);
  at::Tensor anchors = at::zeros({batch, num_anchors}, at::kLong);
  at::Tensor keep = at::zeros({batch, num_anchors}, at::kBool);
  const bool* m = mask.data_ptr<bool>();
  int64_t* a = anchors.data_ptr<int64_t>();
  bool* k = keep.data_ptr<bool>();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> valid;
    for (int64_t p = 0; p + 1 < S; ++p)
      if (m[b * S + p] && m[b * S + p + 1]) valid.push_back(p);
    const int64_t take = std::min<int64_t>(num_anchors, int64_t(valid.size()));
    // Partial Fisher-Yates: the first `take` entries become a uniform sample without replacement.
    for (int64_t i = 0; i < take; ++i) {
      std::uniform_int_distribution<int64_t> pick(i, int64_t(valid.size()) - 1);
      std::swap(valid[size_t(i)], valid[size_t(pick(rng))]);
    }
    std::sort(valid.begin(), valid.begin() + take);
    for (int64_t i = 0; i < take; ++i) {
      a[b * num_anchors + i] = valid[size_t(i)];
      k[b * num_anchors + i] = true;
    }
  }
  return {anchors.to(loss_mask_in.device()), keep.to(loss_mask_in.device())};
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
  const at::Tensor weights = decay * keep_rows * lm * inside.to(at::kDouble);
  const at::Tensor teacher_pos = (pos - 1).clamp(0, S - 1);
  const at::Tensor base = at::arange(batch, slot.options()).mul_(S).unsqueeze(1);
  return {block_ids.reshape({batch, N * B}), labels, weights, teacher_pos + base};
}

}  // namespace dflash::drafter
