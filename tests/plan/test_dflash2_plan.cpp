// The memory planner for a DFlash2 drafter: its parameters counted, the convs' and the selector's bytes by hand
// (through the family's cost hooks, drafter/family_cost.h), and a peak above the same DFlash drafter's.
#include <gtest/gtest.h>

#include <string>

#include "drafter_config.h"
#include "family_cost.h"
#include "memory_planner.h"
#include "tiny_drafter_config.h"

using namespace dflash::plan;
using namespace dflash::drafter;

namespace {

PlanSettings tiny(bool dflash2) {
  nlohmann::json j = tiny_drafter_config_json();
  if (dflash2) {
    j["architectures"] = {"DFlash2DraftModel"};
    j["dflash_config"]["conv_kernel_size"] = 2;
    j["dflash_config"]["conv_group_size"] = 4;
    j["dflash_config"]["selector_rank"] = 6;
    j["dflash_config"]["selector_top_k"] = 5;
  }
  PlanSettings s;
  s.cfg = parse_drafter_config(j, "tiny");
  s.seq_len = 20;
  s.num_anchors = 3;
  s.dtype_bytes = 4;
  s.loss_chunk_rows = 6;
  return s;
}

double term(const MemoryPlan& p, const std::string& name) {
  for (const auto& t : p.terms)
    if (t.name == name) return t.bytes;
  return -1;
}

}  // namespace

TEST(DFlash2Plan, TermsByHandAndAPeakAboveDFlash) {
  const MemoryPlan a = plan_memory(tiny(false)), b = plan_memory(tiny(true));
  // d 16, 2 layers, K_conv 2, G 4, r 6, V 32: per layer 2 convs x ([2, 2, 16] + [2*2*4, 16]); selector [6, 16] + 2 [32, 6]
  EXPECT_EQ(b.params - a.params, 2 * 2 * (64 + 256) + 96 + 2 * 192);
  const double T = 3 * 4, rows = T * 3 / 4, e = 4;
  // conv kernel 2: one shifted input per conv, two convs per site
  EXPECT_DOUBLE_EQ(term(b, "dflash2 convs (saved per layer)"), 2 * T * (2 * 2 * 16 / 4 + 3 * 16 + 2 * 1 * 16) * e);
  EXPECT_DOUBLE_EQ(term(b, "dflash2 selector (saved for backward)"), rows * (5 * 6 + 3 * 6) * e + rows * 5 * 16);
  // The unary top-K's temporaries (the plan is CUDA's): a 6-row chunk x V x 12 bytes; on the CPU none (a scan).
  EXPECT_DOUBLE_EQ(term(b, "dflash2 unary top-K (off the CPU)"), 6 * 32 * 12);
  PlanSettings cpu = tiny(true);
  cpu.device = PlanDevice::Cpu;
  EXPECT_DOUBLE_EQ(term(plan_memory(cpu), "dflash2 unary top-K (off the CPU)"), 0.0);
  EXPECT_EQ(term(a, "dflash2 unary top-K (off the CPU)"), -1);  // no such term for DFlash
  EXPECT_GT(b.peak_bytes, a.peak_bytes);
  // DFlash's cost hooks add nothing: the planner counts the backbone itself.
  const PlanSettings dflash = tiny(false);
  const FamilyMemory none = family_cost(dflash.cfg).memory(dflash.cfg, cost_shape_of(dflash));
  EXPECT_EQ(none.saved_per_layer + none.params_outside_layers + none.loss_saved + none.loss_chunk_beside, 0.0);
  EXPECT_LT(none.loss_chunk_buffers, 0);
  EXPECT_TRUE(none.terms.empty() && none.forward_phases.empty() && none.backward_phases.empty());
}

TEST(DFlash2Plan, TheSelectorsTopKNeedsNoLmHeadPassOnAnyDevice) {
  // The unary loss hands the selector its top-K from its own logits, on the CPU and on CUDA alike.
  PlanSettings s = tiny(true);
  const auto lm_head = [](const PlanSettings& p) { return family_cost(p.cfg).flops(p.cfg, cost_shape_of(p)).lm_head; };
  s.device = PlanDevice::Cuda;
  EXPECT_DOUBLE_EQ(lm_head(s), 0.0);
  s.device = PlanDevice::Cpu;
  EXPECT_DOUBLE_EQ(lm_head(s), 0.0);
}
