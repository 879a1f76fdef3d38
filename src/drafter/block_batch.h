// Training blocks from one batch of sequences (SPEC.md "Training sample construction"): anchor sampling,
// block inputs [token[a], MASK, ...], same-position labels and the per-slot loss weights.
#pragma once
#include <cstdint>
#include <random>

#include <ATen/core/Tensor.h>

namespace dflash::drafter {

struct AnchorSample {
  at::Tensor anchors;  // [b, N] int64, sorted ascending among kept blocks; padding blocks hold 0
  at::Tensor keep;     // [b, N] bool; true for the first count(b) entries
};

// Valid anchors a satisfy loss_mask[a] && loss_mask[a+1] (a+1 < S). Draws min(N, #valid) of them per
// sequence without replacement with `rng`, sorts them, pads with keep=false.
AnchorSample sample_anchors(const at::Tensor& loss_mask, int64_t num_anchors, std::mt19937_64& rng);

struct BlockBatch {
  at::Tensor block_ids;      // [b, N*B] int64: token[a] in slot 0, mask_token_id elsewhere
  at::Tensor labels;         // [b, N*B] int64: token[a+k] (0 where a+k >= S)
  at::Tensor weights;        // [b, N*B] float64: w_k * keep * loss_mask[a+k] * (a+k<S) * (k>0)
  at::Tensor teacher_index;  // [b, N*B] int64: flat index b*S + (a+k-1) into the target's last hidden state
};

// w_k = exp(-(k-1)/gamma) for k >= 1 (slot 0 gets 0).
at::Tensor slot_decay_weights(int64_t block_size, double gamma);

BlockBatch build_block_batch(const at::Tensor& input_ids, const at::Tensor& loss_mask, const AnchorSample& anchors,
                             int64_t block_size, int64_t mask_token_id, double gamma);

}  // namespace dflash::drafter
