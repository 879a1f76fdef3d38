// What a DFlash2 drafter drafts, measured on training blocks (docs/DFLASH2.md): the
// accepted length of the path the selector walks fed with its own picks, not the unary argmax (TorchSpec #177),
// the unary top-K oracle's and the unary argmax path's accepted lengths. Sums over blocks, so chunks of blocks add up.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "candidate_selector.h"

namespace dflash::drafter {

struct SelectorBlockMetrics {
  at::Tensor blocks;             // blocks with any masked-in drafted slot (the others are not counted)
  at::Tensor path_length_sum;    // sum of 1 + the prefix of slots 1..B-1 where the greedy walk's pick == target
  at::Tensor oracle_length_sum;  // sum of 1 + the prefix where the target is in the slot's unary top-K
  at::Tensor unary_length_sum;   // sum of 1 + the prefix where the unary argmax (rank 1 of the top-K) == target:
                                 // DFlash's greedy path, the baseline the selector's walk must beat
};

// hidden [N, B, d] (final-normed, slot 0 = the anchor's), lm_head [V, d], anchors [N] (slot-0 tokens),
// targets [N, B] int64, mask [N, B] bool (slot 0 ignored). No autograd.
SelectorBlockMetrics selector_block_metrics(const SelectorWeights& w, const at::Tensor& hidden,
                                            const at::Tensor& lm_head, const at::Tensor& anchors,
                                            const at::Tensor& targets, const at::Tensor& mask, int64_t top_k,
                                            const UnaryLogitOptions& opt = {}, int64_t vocab_chunk = 8192);
// The same with the drafted slots' top-K already found: cands [N, B-1, K] of hidden's slots 1..B-1.
SelectorBlockMetrics selector_block_metrics(const SelectorWeights& w, const at::Tensor& hidden,
                                            const Candidates& cands, const at::Tensor& anchors,
                                            const at::Tensor& targets, const at::Tensor& mask);

}  // namespace dflash::drafter
