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
#include "selector_metrics.h"

namespace dflash::drafter {

struct DFlash2LossOptions {
  double selector_weight = kDefaultSelectorLossWeight;  // alpha (0: the term is measured, not trained)
  SelectorLossOptions selector;                         // top_k, inject | strict, stop_gradient
  int64_t chunk_rows = 1024;                            // drafted rows per chunk (whole blocks; at least one)
};

// Sums over the batch's blocks (they add up across micro-batches and workers), plus L_sel.
struct DFlash2Stats {
  at::Tensor selector_loss;      // L_sel: scalar, differentiable (0 when nothing weighs)
  SelectorLossTerms terms;       // ce_sum, covered_weight, weight, rows, recall_hits, selector_hits
  SelectorBlockMetrics blocks;   // blocks; the walk's, the top-K oracle's and the unary path's length sums
  bool defined() const { return selector_loss.defined(); }
};

// hidden [b, N*B, d] (the drafter's final-normed hidden states), lm_head [V, d] (frozen), blocks from
// build_block_batch with block size B. unary_top: the top-K of every row of hidden ([b, N*B, K]) when the caller
// has it already (the chunked unary loss takes it from its own logits: ops::chunked_lm_loss_with_top_k; only rows
// of weight > 0 are read); undefined: found here, a second LM-head pass.
DFlash2Stats dflash2_selector_objective(const SelectorWeights& w, const at::Tensor& hidden, const at::Tensor& lm_head,
                                        const BlockBatch& blocks, int64_t block_size, const DFlash2LossOptions& opt,
                                        const Candidates& unary_top = {});

}  // namespace dflash::drafter
