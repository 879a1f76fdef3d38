// DFlash2's cost of a training step (family_cost.h): its convs and its selector, as the planner counts them
// (docs/DFLASH2.md). Its parameters are in drafter_weight_shapes; this is the rest.
#pragma once
#include "family_cost.h"

namespace dflash::families {

const drafter::FamilyCost& dflash2_cost();

// The bytes behind DFlash2's memory (FamilyMemory's terms), for a step of T block tokens (rows) in a dtype of e bytes
// with loss chunks of chunk_rows rows.
struct DFlash2PlanBytes {
  double conv_saved_per_layer = 0;  // a layer without checkpointing: delta [T, 2, K, d/G], the conv outputs and
                                    // the convs' shifted inputs (2 (min(K, B) - 1) x [T, d]), x 2 sites
  double selector_saved = 0;        // kept for backward from the loss forward: rows x K x r gathered successor rows,
                                    // rows x r (predecessor rows, projection, gate), rows x K scores and ids
  double selector_chunk = 0;        // transient off the CPU: the unary top-K's temporaries (64 rows x V)
  double selector_params = 0;       // r d + 2 V r: parameters outside the layers (not part of a layer's gradients)
};
DFlash2PlanBytes dflash2_plan_bytes(const drafter::DrafterConfig& c, double T, double e, double chunk_rows);

}  // namespace dflash::families
