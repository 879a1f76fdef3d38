// What DFlash2 adds to a training step's memory (docs/DFLASH2.md): its parameters are in drafter_weight_shapes;
// this is the rest. All zero for another family.
#pragma once
#include "drafter_config.h"

namespace dflash::plan {

struct DFlash2PlanBytes {
  double conv_saved_per_layer = 0;  // a layer without checkpointing: delta [T, 2, K, d/G], the conv outputs and
                                    // the convs' shifted inputs (2 (min(K, B) - 1) x [T, d]), x 2 sites
  double selector_saved = 0;        // kept for backward from the loss forward: rows x K x r gathered successor rows,
                                    // rows x r (predecessor rows, projection, gate), rows x K scores and ids
  double selector_chunk = 0;        // transient: one chunk's top-K logits (rows x vocabulary chunk, fp32)
  double selector_params = 0;       // r d + 2 V r: parameters outside the layers (not part of a layer's gradients)
};

// T: block tokens of the step (rows), e: compute dtype bytes, chunk_rows: loss_chunk_rows.
DFlash2PlanBytes dflash2_plan_bytes(const drafter::DrafterConfig& c, double T, double e, double chunk_rows);

}  // namespace dflash::plan
