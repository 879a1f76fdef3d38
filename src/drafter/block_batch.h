// Training blocks from one batch of sequences (docs/DFLASH.md "Training samples"): anchor sampling,
// block inputs [token[a], MASK, ...], same-position labels and the per-slot loss weights.
#pragma once
#include <cstdint>
#include <random>

#include <ATen/core/Tensor.h>

namespace dflash::drafter {

struct AnchorSample {
  at::Tensor anchors;  // [b, N] int64, sorted ascending among kept blocks; padding blocks hold 0
  at::Tensor keep;     // [b, N] bool; true for the first count(b) entries
  // Packed rows (several documents per row; both undefined when every row is one sequence):
  at::Tensor doc_start;  // [b, S] int64: the first position of each token's document
  at::Tensor ctx_start;  // [b, N] int64: the first position of each block's document, where its context starts
};

// Valid anchors a satisfy loss_mask[a] && loss_mask[a+1] (a+1 < S, and in packed rows a+1 in a's document).
// Draws min(num_anchors, #valid) of them per sequence -- per document in packed rows (`doc_start` given),
// documents in row order -- without replacement with `rng`, sorts them, pads with keep=false. A packed row
// of documents gets the very anchors (shifted by the documents' starts) that the same documents get one per
// row, so packing changes no training result. N = num_anchors, or in packed rows the most any row holds.
AnchorSample sample_anchors(const at::Tensor& loss_mask, int64_t num_anchors, std::mt19937_64& rng,
                            const at::Tensor& doc_start = at::Tensor());

struct BlockBatch {
  at::Tensor block_ids;      // [b, N*B] int64: token[a] in slot 0, mask_token_id elsewhere
  at::Tensor labels;         // [b, N*B] int64: token[a+k] (0 where a+k >= S)
  at::Tensor weights;        // [b, N*B] float64: w_k * keep * loss_mask[a+k] * (a+k<S) * (k>0)
                             //   (* (a+k in a's document) in packed rows)
  at::Tensor teacher_index;  // [b, N*B] int64: flat index b*S + (a+k-1) into the target's last hidden state
};

// w_k = exp(-(k-1)/gamma) for k >= 1 (slot 0 gets 0); gamma = +inf: no decay (w_k = 1 for k >= 1).
at::Tensor slot_decay_weights(int64_t block_size, double gamma);

// Packed rows (anchors.doc_start defined): labels past the anchor's document weigh 0.
BlockBatch build_block_batch(const at::Tensor& input_ids, const at::Tensor& loss_mask, const AnchorSample& anchors,
                             int64_t block_size, int64_t mask_token_id, double gamma);

}  // namespace dflash::drafter
