// DFlash2's selector objective on a training batch (docs/DFLASH2.md "The objective"):
//   L = L_unary + alpha * L_sel,  L_sel = sum w m CE_K(S_k(p_k, C'_k), idx(y_k)) / sum w
// (SpecForge's normalisation: the selector's numerator over the unary loss's sum w, so L is one sum over rows
// divided by sum w, and a step split into micro-batches weighted by their sum w trains the same loss)
// over the drafted slots k = 1..B-1 with DFlash's same-position labels y_k = x[a+k] and weights w (decay x mask),
// and teacher-forced predecessors p_1 = x[a] (the anchor), p_k = x[a+k-1]. The top-K, the selector's scores and
// the metrics of what is drafted are computed a chunk of blocks at a time, the top-K one vocabulary chunk at a
// time: no [rows, V] tensor. Autograd keeps [rows, K, r] per chunk (the selector's gathered codebook rows).
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "block_batch.h"
#include "candidate_selector.h"
#include "selector_objective_types.h"

namespace dflash::drafter {

// hidden [b, N*B, d] (the drafter's final-normed hidden states), lm_head [V, d] (frozen), blocks from
// build_block_batch with block size B. unary_top: the top-K of every row of hidden ([b, N*B, K]) when the caller
// has it already (the chunked unary loss takes it from its own logits: ops::chunked_lm_loss_with_top_k; only rows
// of weight > 0 are read); undefined: found here, a second LM-head pass.
DFlash2Stats dflash2_selector_objective(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const BlockBatch& blocks, int64_t block_size, const DFlash2LossOptions& opt,
                                        const Candidates& unary_top = {});

}  // namespace dflash::drafter
