// DSpark's training blocks (docs/DSPARK.md, DeepSpec qwen3/modeling.py): the same anchors and block
// inputs [x_a, MASK, ...] as DFlash, with next-token alignment over all B slots:
//   label y_j = x[a+j+1], previous token p_0 = x_a and p_j = x[a+j] (teacher-forced: p_j = y_{j-1}),
//   teacher row a+j (the target's last hidden state that predicts y_j),
//   w_j = eval_mask_j * exp(-j/gamma), eval_mask_j = prod_{i<=j} keep * [a+i+1 < S] * loss_mask[a+i+1]
//   (* [a+i+1 in a's document] in packed rows): a contiguous prefix of each block.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "block_batch.h"

namespace dflash::drafter {

// w_j = exp(-j/gamma) for j in [0, B); gamma = +inf: every slot 1.
at::Tensor dspark_slot_decay_weights(int64_t block_size, double gamma);

// BlockBatch with DSpark's labels, weights and teacher_index (labels are 0 and weights 0 past the prefix).
BlockBatch build_dspark_block_batch(const at::Tensor& input_ids, const at::Tensor& loss_mask,
                                    const AnchorSample& anchors, int64_t block_size, int64_t mask_token_id,
                                    double gamma);

// The teacher-forced previous token of every slot [b, N*B]: block_ids' slot 0 (the anchor), then the label of
// the slot before (a real token wherever the slot's weight is > 0: the mask is a prefix).
at::Tensor dspark_prev_tokens(const BlockBatch& blocks, int64_t block_size);

}  // namespace dflash::drafter
