#include "dspark_block_batch.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace dflash::drafter {

at::Tensor dspark_slot_decay_weights(int64_t block_size, double gamma) {
  if (!(gamma > 0)) throw std::invalid_argument("loss gamma must be positive, got " + std::to_string(gamma));
  at::Tensor w = at::zeros({block_size}, at::kDouble);
  for (int64_t j = 0; j < block_size; ++j) w[j] = std::exp(-double(j) / gamma);
  return w;
}

BlockBatch build_dspark_block_batch(const at::Tensor& input_ids, const at::Tensor& loss_mask, const AnchorSample& s,
                                    int64_t B, int64_t mask_token_id, double gamma) {
  if (input_ids.dim() != 2 || loss_mask.sizes() != input_ids.sizes())
    throw std::invalid_argument("build_dspark_block_batch: input_ids and loss_mask must both be [batch, S]");
  if (s.anchors.dim() != 2 || s.anchors.size(0) != input_ids.size(0) || s.keep.sizes() != s.anchors.sizes())
    throw std::invalid_argument("build_dspark_block_batch: anchors/keep must be [batch, N] with the batch of input_ids");
  const int64_t batch = input_ids.size(0), S = input_ids.size(1), N = s.anchors.size(1);
  const auto dev = input_ids.device();
  const at::Tensor slot = at::arange(B, at::TensorOptions().dtype(at::kLong).device(dev));
  const at::Tensor pos = s.anchors.unsqueeze(-1) + slot + 1;  // [b, N, B]: a + j + 1, the label's position
  const at::Tensor inside = pos < S;
  const at::Tensor pos_c = pos.clamp_max(S - 1).reshape({batch, N * B});
  at::Tensor alive = inside.view({batch, N * B}) & at::gather(loss_mask.to(at::kBool), 1, pos_c);
  if (s.doc_start.defined()) {  // packed rows: a label in the next document is not this block's
    const at::Tensor doc_of_label = at::gather(s.doc_start, 1, pos_c);
    const at::Tensor doc_of_anchor = at::gather(s.doc_start, 1, s.anchors.clamp(0, S - 1));
    alive = alive & doc_of_label.view({batch, N, B}).eq(doc_of_anchor.unsqueeze(-1)).reshape({batch, N * B});
  }
  alive = alive.view({batch, N, B}) & s.keep.unsqueeze(-1);
  const at::Tensor prefix = alive.to(at::kLong).cumprod(-1).to(at::kDouble);  // the contiguous-prefix eval mask
  const at::Tensor weights = (prefix * dspark_slot_decay_weights(B, gamma).to(dev)).reshape({batch, N * B});
  const at::Tensor labels = at::gather(input_ids, 1, pos_c).masked_fill(weights.eq(0), 0);
  at::Tensor block_ids = at::full({batch, N, B}, mask_token_id, input_ids.options().dtype(at::kLong));
  block_ids.select(2, 0).copy_(at::gather(input_ids, 1, s.anchors.clamp(0, S - 1)));
  const at::Tensor base = at::arange(batch, slot.options()).mul_(S).unsqueeze(1);
  const at::Tensor teacher_pos = (pos_c - 1).clamp(0, S - 1);  // a + j: the row that predicts x[a+j+1]
  return {block_ids.reshape({batch, N * B}), labels, weights, teacher_pos + base};
}

at::Tensor dspark_prev_tokens(const BlockBatch& blocks, int64_t B) {
  const int64_t b = blocks.labels.size(0);
  const at::Tensor labels = blocks.labels.reshape({b, -1, B});
  const at::Tensor first = blocks.block_ids.reshape({b, -1, B}).narrow(2, 0, 1);
  return at::cat({first, labels.narrow(2, 0, B - 1)}, 2).reshape({b, -1});
}

}  // namespace dflash::drafter
