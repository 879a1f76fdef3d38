// `plan --node`: the drafter step's FLOPs against a hand count, the chosen split in cases whose answer is clear
// (target-bound, drafter-bound, a target too big for one device), the rate of the chosen split, the presets
// against the files they stand for, and bad settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "drafter_config.h"
#include "drafter_presets.h"
#include "family_cost.h"
#include "memory_planner.h"
#include "node_planner.h"
#include "target_presets.h"
#include "target_config.h"
#include "tiny_drafter_config.h"

using namespace dflash::plan;
using namespace dflash::drafter;

namespace {

PlanSettings tiny_plan() {
  PlanSettings s;
  s.cfg = parse_drafter_config(tiny_drafter_config_json(), "tiny");
  s.batch = 1;
  s.seq_len = 20;
  s.num_anchors = 3;
  s.kl_weight = 0;
  return s;
}

// The 8B preset with a 1-layer drafter at a short sequence (a worker of a few GB), on GPUs of `memory` bytes.
NodeSettings small_node(double memory, int64_t gpus, double target_eff, double drafter_eff) {
  NodeSettings n;
  n.target = dflash::models::target_preset("qwen3-8b");
  n.drafter = plan_preset("qwen3-8b");
  n.drafter.cfg.num_hidden_layers = 1;
  n.drafter.cfg.layer_types = {"full_attention"};
  n.drafter.cfg.target_layer_ids = default_target_layer_ids(36, 1);
  n.drafter.seq_len = 512;
  n.drafter.num_anchors = 32;
  n.gpu = {"test", memory, 100e12};
  n.gpus = gpus;
  n.target_efficiency = target_eff;
  n.drafter_efficiency = drafter_eff;
  return n;
}

}  // namespace

TEST(NodePlanner, DrafterStepFlopsMatchAHandCount) {
  // Tiny drafter: H 16, I 24, 4 q heads and 2 KV heads of 4 (Q 16, K 8), 2 layers (window 8, full), block 4,
  // vocab 32, 2 target layers. 3 anchors: T = 12 block tokens; context C = 20.
  // layer linear (forward): 2 T H Q + 2 x 2 (C + T) H K + 2 T Q H + 2 T 3 H I
  //   = 6144 + 16384 + 6144 + 27648 = 56320; forward + backward = 3x, 2 layers
  // attention forward 4 T keys Hq D = 768 keys: sliding keys min(10, 8) + 4 = 12 -> 9216, full 10 + 4 = 14 -> 10752;
  //   forward + backward = 3.5x
  // fc: 2 C (n H) H = 20480, forward + weight gradient = 2x; LM head: logits + d(hidden) = 2 x 2 T V H = 24576
  PlanSettings s = tiny_plan();
  DrafterFlops f = drafter_step_flops(s);
  EXPECT_DOUBLE_EQ(f.linear, 2 * 3 * 56320.0);
  EXPECT_DOUBLE_EQ(f.attention, 3.5 * (9216.0 + 10752.0));
  EXPECT_DOUBLE_EQ(f.fc, 2 * 20480.0);
  EXPECT_DOUBLE_EQ(f.lm_head, 24576.0);
  EXPECT_DOUBLE_EQ(f.recompute, 0.0);
  s.kl_weight = 0.15;  // the teacher's logits: a third pass
  s.checkpoint = CheckpointPolicy{1};  // every layer's forward again in the backward
  f = drafter_step_flops(s);
  EXPECT_DOUBLE_EQ(f.lm_head, 1.5 * 24576.0);
  EXPECT_DOUBLE_EQ(f.recompute, (56320.0 + 9216.0) + (56320.0 + 10752.0));
}

TEST(NodePlanner, DSparkTeacherRunsOncePerTargetPosition) {
  // DSpark's L1 teacher is the target's logits at each drafted row's target position, computed once per distinct
  // position: T rows while the blocks do not overlap, at most batch x S once they must (T = 12 > S = 8 here).
  PlanSettings s = tiny_plan();
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"Qwen3DSparkModel"};
  j["markov_rank"] = 4;
  j["markov_head_type"] = "vanilla";
  j["enable_confidence_head"] = true;
  j["confidence_head_with_markov"] = true;
  s.cfg = parse_drafter_config(j, "tiny dspark");
  const double T = 12, V = 32, H = 16;
  const auto teacher_flops = [&](int64_t seq_len) {
    s.seq_len = seq_len;
    const double family = family_cost(s.cfg).flops(s.cfg, cost_shape_of(s)).lm_head;
    return drafter_step_flops(s).lm_head - family - 2 * 2 * T * V * H;  // less the logits and d(hidden)
  };
  EXPECT_DOUBLE_EQ(teacher_flops(20), 2 * T * V * H);
  EXPECT_DOUBLE_EQ(teacher_flops(8), 2 * 8 * V * H);
}

TEST(NodePlanner, ChoosesTheSplitThatIsClear) {
  // 3 GPUs with room for everything. A target 100x slower than a drafter step: as many replicas as leave one
  // worker (2 replicas of one stage rather than one of two stages: the same rate, less to hand over).
  NodePlan p = plan_node(small_node(1e15, 3, 0.01, 1.0));
  ASSERT_FALSE(p.splits.empty());
  EXPECT_EQ(p.splits.front().replicas, 2);
  EXPECT_EQ(p.splits.front().stages, 1);
  EXPECT_EQ(p.splits.front().workers, 1);
  EXPECT_DOUBLE_EQ(p.splits.front().samples_per_s, 2 / p.target_seconds);
  // The drafter 100x slower: one target replica, two workers.
  p = plan_node(small_node(1e15, 3, 1.0, 0.01));
  EXPECT_EQ(p.splits.front().replicas, 1);
  EXPECT_EQ(p.splits.front().workers, 2);
  EXPECT_DOUBLE_EQ(p.splits.front().samples_per_s, 2 / p.drafter_seconds);
  // A device that holds half the target but not all of it: a replica needs 2 stages (target-bound: 1 x 2 + 1).
  const NodeSettings probe = small_node(1e15, 3, 0.01, 1.0);
  std::vector<int64_t> captured(probe.drafter.cfg.target_layer_ids.begin(), probe.drafter.cfg.target_layer_ids.end());
  captured.push_back(probe.target.num_hidden_layers - 1);  // kl_weight > 0: the last hidden state too
  auto largest = [&](int64_t P) {
    double m = 0;
    for (const auto& st : dflash::models::target_stage_memory(probe.target, 2, P, 512, captured)) m = std::max(m, st.total());
    return m;
  };
  const double memory = (largest(1) + largest(2)) / 2 / probe.usable_memory;
  p = plan_node(small_node(memory, 3, 0.01, 1.0));
  ASSERT_FALSE(p.splits.empty()) << p.why;
  EXPECT_EQ(p.splits.front().replicas, 1);
  EXPECT_EQ(p.splits.front().stages, 2);
  EXPECT_EQ(p.splits.front().workers, 1);
  for (const auto& n : p.splits) EXPECT_GE(n.stages, 2);  // no split puts the whole target on one device
  // The rate of a pipeline: its slowest stage (8B: 36 layers in 2 equal halves -> twice one replica's rate).
  EXPECT_NEAR(p.splits.front().target_samples_per_s, 2 / p.target_seconds, 1e-9 * 2 / p.target_seconds);
}

TEST(NodePlanner, SeedNodePrefersReplicasOverOneFiveStageTarget) {
  NodeSettings n;
  n.target = dflash::models::target_preset("qwen3.6-27b");
  n.drafter = plan_preset("qwen3.6-27b");
  n.gpu = gpu_spec("rtx-pro-6000");
  const NodePlan p = plan_node(n);
  ASSERT_FALSE(p.splits.empty()) << p.why;
  const NodeSplit& b = p.splits.front();
  EXPECT_EQ(b.gpus_used(), 8);
  EXPECT_EQ(b.stages, 1);  // 54 GB of bf16 weights fit one 96 GB card
  EXPECT_GT(b.samples_per_s, 1 / p.target_seconds * 1.5);  // far above one unpipelined replica
  const std::string text = format_node_plan(p);
  EXPECT_NE(text.find("best: "), std::string::npos) << text;
  EXPECT_NE(text.find("target_devices \"cuda:0"), std::string::npos) << text;
}

TEST(NodePlanner, PresetTargetEqualsTheConfigFile) {
  std::ifstream f(std::string(DFLASH_SOURCE_DIR) + "/configs/targets/qwen3.6-27b.json");
  std::stringstream text;
  text << f.rdbuf();
  const auto file = dflash::models::parse_target_config(text.str(), "qwen3.6-27b.json");
  const auto preset = dflash::models::target_preset("qwen3.6-27b");
  EXPECT_EQ(dflash::models::target_params(preset), dflash::models::target_params(file));
  EXPECT_EQ(preset.layer_types, file.layer_types);
  EXPECT_DOUBLE_EQ(dflash::models::target_forward_flops(preset, 8000, false).total(),
                   dflash::models::target_forward_flops(file, 8000, false).total());
}

TEST(NodePlanner, BadSettingsAreClear) {
  auto error_of = [](const NodeSettings& n) {
    try {
      plan_node(n);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(small_node(1e15, 1, 0.5, 0.5)).find("--gpus must be in [2, 256]"), std::string::npos);
  EXPECT_NE(error_of(small_node(1e15, 4, 0.0, 0.5)).find("--target-efficiency must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of(small_node(1e15, 4, 0.5, 1.5)).find("--drafter-efficiency must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of(small_node(0, 4, 0.5, 0.5)).find("memory and bf16 rate must be positive"), std::string::npos);
  try {
    gpu_spec("a100");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h100, h200, b200, rtx-pro-6000"), std::string::npos) << e.what();
  }
  const NodePlan tiny_gpu = plan_node(small_node(1e6, 4, 0.5, 0.5));  // 1 MB devices: nothing fits
  EXPECT_TRUE(tiny_gpu.splits.empty());
  EXPECT_NE(tiny_gpu.why.find("a drafter worker does not fit one GPU"), std::string::npos) << tiny_gpu.why;
}
