// The options and results of DFlash2's selector objective (families/dflash2/dflash2_objective.h, docs/DFLASH2.md
// "The objective") as DrafterLossOptions and DrafterLossResult (drafter_model.h) carry them; the objective itself is
// the family's.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

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

}  // namespace dflash::drafter
