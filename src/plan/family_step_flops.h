// What a drafter family adds to the FLOPs of one training step (node_planner.h's drafter_step_flops), counted from
// the ops the family runs (docs/DSPARK.md, docs/DFLASH2.md). Zero for DFlash. Torch-free.
//
// DSpark (all B slots are trained rows, T of them):
//   lm_head  the Markov bias inside each loss chunk's logits GEMM (addmm with W2 [V, r]), its input gradient
//            g W2 and dW2 = g^T u: 3 x 2 T V r. (The teacher's logits, a third LM-head pass, are drafter_step_flops'.)
//   heads    per row forward: gated 2 r (d + r), rnn 2 x 3r (2r + d), the confidence head 2 (d [+ r]); forward +
//            backward = 3 x forward.
// DFlash2 (rows = T (B - 1) / B drafted slots):
//   heads    per layer, two sites, each: the kernel projection 2 T d (2 K_conv d / G) and two convs of min(K_conv, B)
//            taps x 4 T d (base and delta products, two adds); forward + backward = 3 x forward, and the forward again
//            for a checkpointed layer (recompute);
//            the selector: U at the K candidates, forward + d(hidden) 2 x 2 rows K d; the hidden projection and the
//            scores, 3 x 2 rows (r d + K r); the metrics' walk, forward only: the projection again and the K x K
//            lattice 2 rows (r d + K K r)
//   lm_head  the top-K pass through the frozen LM head, forward only: 2 rows V d (0 on the CPU, where the unary
//            loss hands the selector the top-K of its own logits).
#pragma once
#include "memory_planner.h"

namespace dflash::plan {

struct FamilyFlops {
  double lm_head = 0, heads = 0, recompute = 0;
};
FamilyFlops family_step_flops(const PlanSettings& s);

// Whether a step needs the target's final-normed last hidden state: soft labels (kl_weight > 0) or DSpark's L1
// teacher. The producer captures and ships it; the LM head runs a third pass over it.
bool step_needs_last_hidden(const PlanSettings& s);

}  // namespace dflash::plan
