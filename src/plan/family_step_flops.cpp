#include "family_step_flops.h"

#include <algorithm>

namespace dflash::plan {

using drafter::DrafterFamily;

bool step_needs_last_hidden(const PlanSettings& s) {
  return s.kl_weight > 0 || s.cfg.family == DrafterFamily::DSpark;
}

FamilyFlops family_step_flops(const PlanSettings& s) {
  const drafter::DrafterConfig& c = s.cfg;
  FamilyFlops f;
  const double B = double(c.block_size), T = double(s.batch * s.num_anchors) * B;
  const double d = double(c.hidden_size), V = double(c.vocab_size);  // neither family has a draft vocabulary
  if (c.family == DrafterFamily::DSpark) {
    const double r = double(c.dspark.markov_rank);
    f.lm_head = 3 * 2 * T * V * r;
    double row = 0;
    if (c.dspark.markov_head_type == drafter::MarkovHeadType::Gated) row += 2 * r * (d + r);
    if (c.dspark.markov_head_type == drafter::MarkovHeadType::Rnn) row += 2 * 3 * r * (2 * r + d);
    if (c.dspark.enable_confidence_head) row += 2 * (d + (c.dspark.confidence_head_with_markov ? r : 0));
    f.heads = 3 * T * row;
  } else if (c.family == DrafterFamily::DFlash2) {
    const auto& x = c.dflash2;
    const double Kc = double(x.conv_kernel_size), G = double(x.conv_group_size), K = double(x.selector_top_k),
                 r = double(x.selector_rank);
    const double site = 2 * T * d * (2 * Kc * d / G) + 2 * std::min(Kc, B) * 4 * T * d;
    const double layer = 2 * site;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      f.heads += 3 * layer;
      if (s.checkpoint.applies(i)) f.recompute += layer;
    }
    const double rows = T * (B - 1) / B;
    // On the CPU the selector's top-K comes from the unary loss's own logits: no pass of its own.
    f.lm_head = s.device == PlanDevice::Cpu ? 0 : 2 * rows * V * d;
    f.heads += 2 * 2 * rows * K * d + 3 * 2 * rows * (r * d + K * r) + 2 * rows * (r * d + K * K * r);
  }
  return f;
}

}  // namespace dflash::plan
