// The drafter config derived from a target's config (drafter_from_target.h): unchanged rules for Llama / Qwen3,
// the released Qwen3.5/3.6 drafters' layout for a large hybrid, a small hybrid's own attention layout.
#include <gtest/gtest.h>

#include "drafter_from_target.h"
#include "target_config.h"

using namespace dflash;

namespace {

models::TargetConfig dense(int64_t hidden, int64_t layers) {
  models::TargetConfig t;
  t.arch = models::TargetArch::qwen3;
  t.vocab_size = 151936;
  t.hidden_size = hidden;
  t.intermediate_size = 3 * hidden;
  t.num_hidden_layers = layers;
  t.num_attention_heads = 32;
  t.num_key_value_heads = 8;
  t.head_dim = 128;
  t.rope.theta = 1e6;
  return t;
}

models::TargetConfig hybrid(int64_t hidden, int64_t layers, int64_t vocab) {
  models::TargetConfig t = dense(hidden, layers);
  t.arch = models::TargetArch::qwen3_5;
  t.vocab_size = vocab;
  t.num_attention_heads = 24;
  t.num_key_value_heads = 4;
  t.head_dim = 256;
  t.rope.theta = 1e7;
  return t;
}

}  // namespace

TEST(DrafterFromTarget, DenseTargetKeepsItsLayoutAndFullAttention) {
  const auto d = drafter::drafter_config_for_target(dense(4096, 36), 5, 16, -1, {});
  EXPECT_EQ(d.num_attention_heads, 32);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.layer_types, std::vector<std::string>(5, "full_attention"));
  EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(d.mask_token_id, -1);  // the trainer asks for one
  EXPECT_EQ(d.sliding_window, 0);
}

TEST(DrafterFromTarget, TakesTheTargetsRopeScaling) {
  auto t = dense(4096, 36);
  t.max_position_embeddings = 131072;
  t.rope.type = "yarn";
  t.rope.factor = 4.0;
  t.rope.original_max_position_embeddings = 32768;
  const auto d = drafter::drafter_config_for_target(t, 5, 16, 7, {});
  EXPECT_TRUE(d.rope == t.rope);
  EXPECT_EQ(d.max_position_embeddings, 131072);
  d.validate("drafter");
}

TEST(DrafterFromTarget, LargeQwen35TargetGetsTheReleasedDrafterLayout) {
  auto d = drafter::drafter_config_for_target(hybrid(5120, 64, 248320), 5, 16, -1, {});
  EXPECT_EQ(d.hidden_size, 5120);
  EXPECT_EQ(d.intermediate_size, 3 * 5120);
  EXPECT_EQ(d.num_attention_heads, 32);
  EXPECT_EQ(d.num_key_value_heads, 8);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_DOUBLE_EQ(d.rope.theta, 1e7);
  EXPECT_EQ(d.layer_types, (std::vector<std::string>{"sliding_attention", "sliding_attention", "sliding_attention",
                                                     "sliding_attention", "full_attention"}));
  EXPECT_EQ(d.sliding_window, 2048);
  EXPECT_EQ(d.mask_token_id, 248070);
  EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{1, 16, 31, 46, 61}));
  d.validate("t");
  // An explicit mask and target layers win; one drafter layer is full attention.
  d = drafter::drafter_config_for_target(hybrid(5120, 64, 248320), 1, 16, 248077, {10});
  EXPECT_EQ(d.mask_token_id, 248077);
  EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{10}));
  EXPECT_EQ(d.layer_types, std::vector<std::string>{"full_attention"});
}

TEST(DrafterFromTarget, SmallHybridKeepsItsOwnAttentionLayout) {
  const auto d = drafter::drafter_config_for_target(hybrid(1024, 24, 1000), 2, 8, -1, {});
  EXPECT_EQ(d.num_attention_heads, 24);
  EXPECT_EQ(d.num_key_value_heads, 4);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.layer_types, (std::vector<std::string>{"sliding_attention", "full_attention"}));
  EXPECT_EQ(d.mask_token_id, -1);  // not the Qwen3.5 vocabulary: no default
}
