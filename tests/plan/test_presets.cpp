// One table of targets (configs/targets/, models/target_presets.h) and the drafters planned for them
// (plan/drafter_presets.h): every target preset reads and validates, the drafter planned for a target is the one
// `dflash train` builds for it (drafter_config_for_target), and the shapes that are no target's keep their names.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "drafter_from_target.h"
#include "drafter_presets.h"
#include "error_of.h"
#include "gpu_specs.h"
#include "target_presets.h"

using namespace dflash;

TEST(TargetPresets, EveryFileReadsAndValidates) {
  const auto names = models::target_preset_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* want : {"qwen3-8b", "qwen3.6-27b"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    const models::TargetConfig t = models::target_preset(n);
    EXPECT_NO_THROW(t.validate(n)) << n;
    EXPECT_TRUE(models::is_target_preset(n));
  }
  EXPECT_NE(error_of<std::invalid_argument>([] { models::target_preset("qwen9"); }).find("unknown target preset 'qwen9'"),
            std::string::npos);
}

TEST(DrafterPresets, ATargetsDrafterIsTheOneTrainBuilds) {
  for (const auto& n : models::target_preset_names()) {
    const plan::DrafterPreset p = plan::drafter_preset(n, "test");
    drafter::DrafterConfig want =
        drafter::drafter_config_for_target(models::target_preset(n), 5, 16, p.drafter.mask_token_id, {});
    EXPECT_EQ(drafter::drafter_config_to_json(p.drafter), drafter::drafter_config_to_json(want)) << n;
    EXPECT_EQ(p.target, n);
  }
  // The released Qwen3.6-27B drafters' layout and mask token, whichever way the target is named.
  const drafter::DrafterConfig d = plan::drafter_preset("qwen3.6-27b", "test").drafter;
  EXPECT_EQ(d.num_attention_heads, 32);
  EXPECT_EQ(d.num_key_value_heads, 8);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.mask_token_id, 248070);
  EXPECT_EQ(plan::plan_preset("qwen3.6-27b").cfg.num_attention_heads, 32);
}

TEST(DrafterPresets, TheSeedsShapeHasItsOwnName) {
  const plan::DrafterPreset seed = plan::drafter_preset("seed-27b", "test");
  EXPECT_EQ(seed.drafter.num_attention_heads, 24);
  EXPECT_EQ(seed.drafter.num_key_value_heads, 4);
  EXPECT_EQ(seed.drafter.head_dim, 256);
  EXPECT_EQ(seed.drafter.hidden_size, 5120);
  EXPECT_EQ(seed.target, "qwen3.6-27b");
  EXPECT_TRUE(plan::drafter_preset("cpu-small", "test").target.empty());
  const std::string e = error_of<std::invalid_argument>([] { plan::drafter_preset("qwen9", "plan"); });
  EXPECT_NE(e.find("plan: unknown preset 'qwen9' (expected one of "), std::string::npos) << e;
  EXPECT_NE(e.find("qwen3.6-27b, "), std::string::npos) << e;
  EXPECT_NE(e.find("seed-27b"), std::string::npos) << e;
}

TEST(GpuSpecs, OneTable) {
  EXPECT_DOUBLE_EQ(plan::gpu_spec("h100").memory_bytes, 80e9);
  EXPECT_EQ(plan::gpu_specs().size(), 4u);
}
