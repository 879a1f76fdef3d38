// What a drafter family adds to the cost of one training step, as the planner counts it (`dflash plan`, `plan --node`,
// `bench step`'s planned peak and FLOP floor): bytes and FLOPs as plain numbers, and the rows the plan prints for
// them. The planner (src/plan, a layer above the families) counts the DFlash backbone every family shares and asks
// the family's FamilyCost (Family::cost(), implemented in its folder under src/families) for the rest, so it names
// no family. The default counts nothing: a family that is the backbone plus settings (DFlash, the test-only toy
// family) needs no override. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint_policy.h"
#include "drafter_config.h"

namespace dflash::drafter {

// The step a cost is asked for: the run shape (run_shape.h) as the planner holds it, in numbers, plus the batch
// and the device.
struct StepCostShape {
  int64_t batch = 1;
  int64_t seq_len = 0;          // S: context tokens per sequence (max_len)
  int64_t num_anchors = 0;      // N blocks per sequence (the block size is the DrafterConfig's)
  int64_t dtype_bytes = 2;      // compute/weight dtype: 2 bf16/fp16, 4 fp32, 8 fp64
  int64_t loss_chunk_rows = 0;  // rows of one loss chunk
  CheckpointPolicy checkpoint;  // which layers recompute their forward during the backward
  bool cpu = false;             // the CPU (its fused loss kernels), else CUDA

  // T: the block (query) tokens of the step, the rows of the loss.
  double rows(const DrafterConfig& c) const { return double(batch) * double(num_anchors) * double(c.block_size); }
  // The accumulation dtype's bytes (norm statistics, LSE, loss): fp64 stays fp64, anything narrower accumulates in
  // fp32.
  double accumulation_bytes() const { return dtype_bytes == 8 ? 8.0 : 4.0; }
};

// A row of the plan: a breakdown term or a phase of the step.
struct CostTerm {
  std::string name;
  double bytes = 0;
  std::string how;  // the formula in words
};

// What the family adds to the planner's memory walk (src/plan/memory_planner.cpp) of one step. Its parameters are
// not here: drafter_weight_shapes counts every family's.
struct FamilyMemory {
  // Beside each decoder layer's saved activations when the layer is not checkpointed (DFlash2: its convs).
  double saved_per_layer = 0;
  // Parameters outside the decoder layers whose gradients arrive with the loss's backward, before any layer's
  // (DFlash2: the selector): not part of a layer's gradients.
  double params_outside_layers = 0;
  // Kept for backward from the loss forward on, beside its d(hidden) (DFlash2: the selector's saved rows).
  double loss_saved = 0;
  // Held beside each loss chunk's logit buffers for the whole loss (DSpark: its objective's [V, r] and per-row
  // tensors).
  double loss_chunk_beside = 0;
  // >= 0: the family's own loss kernel holds these logit buffers per chunk instead of the generic ones (rows x V x
  // 2 or 3 in the accumulation dtype), described by loss_chunk_buffers_how (the text in the plan's parentheses,
  // closing one: "2 buffers in the compute dtype: the fused CPU kernel)"). < 0: the generic buffers.
  double loss_chunk_buffers = -1;
  std::string loss_chunk_buffers_how;
  // Phases after "forward: loss chunk", with bytes beyond what is live there without the chunk (static, shared,
  // every saved layer, the final norm and d(hidden)).
  std::vector<CostTerm> forward_phases;
  // Phases after "backward: loss", with bytes beyond what is live there (... and d(hidden)'s scaled copy), without
  // loss_saved.
  std::vector<CostTerm> backward_phases;
  // The family's rows of the plan's breakdown, printed before the loss chunk's.
  std::vector<CostTerm> terms;
};

// What the family adds to the FLOPs of one step (forward + backward; src/plan/node_planner.h drafter_step_flops).
struct FamilyFlops {
  double lm_head = 0;    // passes through the (frozen) LM head beyond the loss's own
  double heads = 0;      // the family's modules
  double recompute = 0;  // their forward again in checkpointed layers
};

class FamilyCost {
 public:
  virtual ~FamilyCost() = default;
  // Whether the objective reads the target's final-normed last hidden state (a teacher of its own, as DSpark's L1),
  // as soft labels (kl_weight > 0) do: the producer captures and ships it, and the LM head runs a third pass over it.
  virtual bool needs_last_hidden(const DrafterConfig& /*c*/) const { return false; }
  // Non-empty: the objective's own teacher term replaces soft labels, so kl_weight must be 0; in plan's refusal's
  // words ("its L1 to the target", in "(... replaces soft labels)") and in bench step's header ("its L1 teacher",
  // where kl_weight is printed otherwise).
  virtual const char* replaces_soft_labels() const { return ""; }
  virtual const char* teacher_label() const { return ""; }
  virtual FamilyMemory memory(const DrafterConfig& /*c*/, const StepCostShape& /*s*/) const { return {}; }
  virtual FamilyFlops flops(const DrafterConfig& /*c*/, const StepCostShape& /*s*/) const { return {}; }
  // How `plan --node` names FamilyFlops::heads in its FLOP line, with a trailing space ("convs + selector ").
  virtual const char* heads_label() const { return "family heads "; }
  // How `bench step` names its loss without the fused CPU kernels (its generic-ce row: "generic <this>").
  virtual const char* generic_loss_label() const { return "cross-entropy"; }
  // Rows of the teacher's LM-head pass when needs_last_hidden: one per drafted row unless the objective computes
  // the teacher once per distinct target position.
  virtual double teacher_rows(const DrafterConfig& c, const StepCostShape& s) const { return s.rows(c); }
};

// The cost of c.family's plug-in (family_registry.h).
const FamilyCost& family_cost(const DrafterConfig& c);

}  // namespace dflash::drafter
