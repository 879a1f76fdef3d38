// Sequence packing (train config `pack`): the samples of a micro-batch, each truncated to max_len, go into as few
// rows as an in-order fill gives (a new row starts when the next sample does not fit), instead of one padded row
// each. A row holds at most max_len tokens and at most num_anchors anchors (the sum over its samples of
// min(num_anchors, valid anchor positions)), so a packed micro-batch never has more rows, positions or blocks per
// row than the unpacked one: the memory plan (`dflash plan`, --budget) holds for both.
// The row records where each document starts (doc_start), which keeps the documents apart everywhere downstream:
// anchors and labels stay inside their document, a block's context starts at its document's first token, RoPE
// positions restart per document (drafter::sample_anchors, build_block_batch, drafter_hidden). Offline features
// and the teacher's last hidden state are packed the same way; online features are computed on the unpacked
// rows first (the target must not attend across documents) and packed after. In-order filling keeps the
// documents in sample order, so the anchors drawn per document are the ones the unpacked micro-batch gets:
// packing changes the shapes, not the loss.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dflash::train {

struct PackedRows {
  at::Tensor input_ids;    // [r, L] int64 (0 after the last document)
  at::Tensor loss_mask;    // [r, L] bool
  at::Tensor features;     // [r, L, nH] or undefined
  at::Tensor last_hidden;  // [r, L, H] or undefined
  at::Tensor doc_start;    // [r, L] int64: first position of each token's document (padding: its own run)
  std::vector<std::vector<int64_t>> rows;  // sample indices of each row, in order
};

// Row assignment, in order: sample i (lengths[i] tokens, already truncated to max_len; anchors[i] anchors at
// most, already capped at max_anchors) joins the current row while the row stays within max_len tokens and
// max_anchors anchors, else starts the next row. Returns the sample indices of each row.
std::vector<std::vector<int64_t>> plan_rows(const std::vector<int64_t>& lengths, const std::vector<int64_t>& anchors,
                                            int64_t max_len, int64_t max_anchors);

// The anchors sample_anchors can draw in each row of loss_mask [b, S] (positions p, p+1 < lengths[i], both in
// the loss), capped at num_anchors.
std::vector<int64_t> anchor_capacity(const at::Tensor& loss_mask, const std::vector<int64_t>& lengths,
                                     int64_t num_anchors);

// Packs one-sample-per-row tensors ([b, S...], sample i in row i, its first lengths[i] positions real) into rows
// planned by plan_rows. The row length L is the longest row's, rounded up to pad_multiple (never past max_len).
PackedRows pack_rows(const at::Tensor& input_ids, const at::Tensor& loss_mask, const at::Tensor& features,
                     const at::Tensor& last_hidden, const std::vector<int64_t>& lengths, int64_t max_len,
                     int64_t num_anchors, int64_t pad_multiple);

}  // namespace dflash::train
