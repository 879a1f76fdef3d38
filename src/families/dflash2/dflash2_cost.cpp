#include "dflash2_cost.h"

#include <algorithm>

#include "dflash2_drafter_settings.h"

namespace dflash::families {

DFlash2PlanBytes dflash2_plan_bytes(const drafter::DrafterConfig& c, double T, double e, double chunk_rows) {
  DFlash2PlanBytes b;
  const auto& x = dflash2_settings(c);
  const double d = double(c.hidden_size), B = double(c.block_size), Kc = double(x.conv_kernel_size),
               G = double(x.conv_group_size), K = double(x.selector_top_k), r = double(x.selector_rank);
  // Per site: delta (2 K d/G), the pre-conv output, the sublayer output and the post-conv output (d each), and
  // each of its two convs' zero-padded shifted inputs, one per tap 1..min(K, B)-1 (dynamic_block_conv.cpp: saved
  // by the tap's products).
  const double shifted = 2 * (std::min(Kc, B) - 1) * d;
  b.conv_saved_per_layer = 2 * T * (2 * Kc * d / G + 3 * d + shifted) * e;
  const double rows = T * (B - 1) / B;  // drafted slots
  b.selector_saved = rows * (K * r + 3 * r) * e + rows * K * (4 + 8 + 4);
  // Off the CPU the unary loss takes the top-K from each chunk's logits 64 rows at a time (row_top_k_by_threshold):
  // a value copy, an int32 count and four byte masks per row and column.
  const double chunk = std::min(rows, std::max(B - 1, chunk_rows));
  b.selector_chunk = std::min(chunk, 64.0) * double(c.vocab_size) * 12;
  b.selector_params = r * d + 2 * double(c.vocab_size) * r;
  return b;
}

namespace {

using drafter::DrafterConfig;
using drafter::StepCostShape;

// FLOPs (rows = T (B - 1) / B drafted slots):
//   heads    per layer, two sites, each: the kernel projection 2 T d (2 K_conv d / G) and two convs of min(K_conv, B)
//            taps x 4 T d (base and delta products, two adds); forward + backward = 3 x forward, and the forward again
//            for a checkpointed layer (recompute);
//            the selector: U at the K candidates, forward + d(hidden) 2 x 2 rows K d; the hidden projection and the
//            scores, 3 x 2 rows (r d + K r); the metrics' walk, forward only: the projection again and the K x K
//            lattice 2 rows (r d + K K r)
//   lm_head  none: the unary loss hands the selector the top-K of its own logits (no second LM-head pass).
class DFlash2Cost final : public drafter::FamilyCost {
 public:
  const char* heads_label() const override { return "convs + selector "; }

  drafter::FamilyMemory memory(const DrafterConfig& c, const StepCostShape& s) const override {
    const DFlash2PlanBytes x2 = dflash2_plan_bytes(c, s.rows(c), double(s.dtype_bytes), double(s.loss_chunk_rows));
    drafter::FamilyMemory m;
    m.saved_per_layer = x2.conv_saved_per_layer;
    m.params_outside_layers = x2.selector_params;
    m.loss_saved = x2.selector_saved;
    if (x2.selector_saved > 0) {
      // The selector term runs after the LM-head loss, its graph kept for backward. Its top-K comes from the loss's
      // own logits (chunked_lm_loss_with_top_k): on the CPU by a scan, elsewhere with temporaries beside the chunk.
      m.forward_phases.push_back({"forward: selector", x2.selector_saved, "... + the selector's saved rows x K x r"});
      if (!s.cpu) m.loss_chunk_beside += x2.selector_chunk;
      m.terms = {{"dflash2 selector (saved for backward)", x2.selector_saved,
                  "drafted rows x (K x r + 3 r) x dtype + rows x K scores, ids"},
                 {"dflash2 unary top-K (off the CPU)", s.cpu ? 0 : x2.selector_chunk,
                  "min(chunk rows, 64) x V x 12 (row_top_k_by_threshold's temporaries, beside the loss chunk)"},
                 {"dflash2 convs (saved per layer)", x2.conv_saved_per_layer,
                  "2 sites x T x (2 K d/G + 3 d + 2 (min(K, B) - 1) d) x dtype"}};
    }
    return m;
  }

  drafter::FamilyFlops flops(const DrafterConfig& c, const StepCostShape& s) const override {
    drafter::FamilyFlops f;
    const double B = double(c.block_size), T = double(s.batch * s.num_anchors) * B;
    const double d = double(c.hidden_size);
    const auto& x = dflash2_settings(c);
    const double Kc = double(x.conv_kernel_size), G = double(x.conv_group_size), K = double(x.selector_top_k),
                 r = double(x.selector_rank);
    const double site = 2 * T * d * (2 * Kc * d / G) + 2 * std::min(Kc, B) * 4 * T * d;
    const double layer = 2 * site;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      f.heads += 3 * layer;
      if (s.checkpoint.applies(i)) f.recompute += layer;
    }
    const double rows = T * (B - 1) / B;
    f.lm_head = 0;  // the selector's candidates come from the unary loss's logits on every device
    f.heads += 2 * 2 * rows * K * d + 3 * 2 * rows * (r * d + K * r) + 2 * rows * (r * d + K * K * r);
    return f;
  }
};

}  // namespace

const drafter::FamilyCost& dflash2_cost() {
  static const DFlash2Cost cost;
  return cost;
}

}  // namespace dflash::families
