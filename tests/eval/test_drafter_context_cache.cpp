// The inference-time drafter (cached context K/V, one block at the context's end) gives the same hidden
// states as the training forward drafter_hidden() with one block anchored at the context length: full
// and sliding-window layers, context appended in pieces, after cropping a longer context, and with the reference
// attention backend.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "drafter_context_cache.h"
#include "drafter_model.h"
#include "family_registry.h"

namespace {

using namespace dflash;

drafter::DrafterConfig tiny_config() {
  drafter::DrafterConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_hidden_layers = 3;
  c.num_target_layers = 8;
  c.block_size = 4;
  c.vocab_size = 50;
  c.mask_token_id = 49;
  c.rope.theta = 10000;
  c.sliding_window = 5;
  c.layer_types = {"full_attention", "sliding_attention", "full_attention"};
  c.target_layer_ids = {1, 6};
  c.validate("test");
  return c;
}

struct Fixture {
  drafter::DrafterConfig c = tiny_config();
  drafter::DrafterWeights w;
  at::Tensor embed;
  Fixture() {
    w = drafter::init_drafter_weights(c, at::kDouble, 7, 0.2, 0.1);
    embed = at::randn({c.vocab_size, c.hidden_size}, at::kDouble);
  }
  at::Tensor reference(const at::Tensor& feats, const std::vector<int64_t>& block) {
    const int64_t S = feats.size(1), B = c.block_size;
    drafter::FrozenTarget t{embed, embed};
    return drafter::drafter_hidden(c, w, t, feats, at::tensor(block, at::kLong).view({1, B}),
                                   at::full({1, 1}, S, at::kLong), at::ones({1, 1}, at::kBool));
  }
};

}  // namespace

TEST(DrafterContextCache, MatchesTrainingForward) {
  at::NoGradGuard ng;
  at::manual_seed(3);
  Fixture f;
  const int64_t S = 9;
  const at::Tensor feats = at::randn({1, S, 2 * f.c.hidden_size}, at::kDouble);
  const std::vector<int64_t> block = {17, 49, 49, 49};
  const at::Tensor ref = f.reference(feats, block);

  eval::DrafterContextCache cache(f.c, f.w);
  cache.append(feats.narrow(1, 0, 5));
  cache.append(feats.narrow(1, 5, 4));
  ASSERT_EQ(cache.length(), S);
  const at::Tensor got = cache.block_hidden(f.embed.index({at::tensor(block, at::kLong)}).unsqueeze(0));
  EXPECT_LT((got - ref).abs().max().item<double>(), 1e-10);

  // A longer context cropped back to S positions gives the same block.
  eval::DrafterContextCache longer(f.c, f.w);
  longer.append(at::cat({feats, at::randn({1, 3, 2 * f.c.hidden_size}, at::kDouble)}, 1));
  longer.crop(S);
  const at::Tensor got2 = longer.block_hidden(f.embed.index({at::tensor(block, at::kLong)}).unsqueeze(0));
  EXPECT_LT((got2 - ref).abs().max().item<double>(), 1e-10);

  // The reference attention backend gives the same block.
  eval::DrafterContextCache reference(f.c, f.w, ops::AttentionBackend::Reference);
  reference.append(feats);
  const at::Tensor got3 = reference.block_hidden(f.embed.index({at::tensor(block, at::kLong)}).unsqueeze(0));
  EXPECT_LT((got3 - ref).abs().max().item<double>(), 1e-10);

  // Sanity: the sliding layer matters (different context length -> different result).
  const at::Tensor other = f.reference(feats.narrow(1, 0, 8), block);
  EXPECT_GT((other - ref).abs().max().item<double>(), 1e-6);
}

// DFlash2: the cached forward wraps each block sublayer in its conv exactly as the training forward does, with
// random (non-identity) convs so a conv that is skipped, crosses into the context or uses the wrong side fails.
TEST(DrafterContextCache, DFlash2MatchesTrainingForward) {
  at::NoGradGuard ng;
  at::manual_seed(5);
  Fixture f;
  f.c.family = dflash::drafter::family_named("dflash2", "test");
  // The family's settings as a config.json gives them (the family's own reader: eval names no family type).
  const nlohmann::json dc = {{"conv_kernel_size", 3}, {"conv_group_size", 16}, {"selector_rank", 8}, {"selector_top_k", 4}};
  f.c.family_settings = dflash::drafter::family_of(f.c.family).read_settings(nlohmann::json::object(), dc, "test");
  f.c.validate("test");
  f.w = drafter::init_drafter_weights(f.c, at::kDouble, 7, 0.2, 0.1);
  ASSERT_EQ(static_cast<int64_t>(f.w.convs.size()), f.c.num_hidden_layers);
  for (auto& cv : f.w.convs)
    for (auto* conv : {&cv.attention_conv, &cv.mlp_conv}) {
      conv->base_kernel.normal_(0, 0.5);
      conv->kernel_projection.normal_(0, 0.2);
    }
  const int64_t S = 7;
  const at::Tensor feats = at::randn({1, S, 2 * f.c.hidden_size}, at::kDouble);
  const std::vector<int64_t> block = {11, 49, 49, 49};
  const at::Tensor ref = f.reference(feats, block);
  eval::DrafterContextCache cache(f.c, f.w);
  cache.append(feats);
  const at::Tensor embeds = f.embed.index({at::tensor(block, at::kLong)}).unsqueeze(0);
  EXPECT_LT((cache.block_hidden(embeds) - ref).abs().max().item<double>(), 1e-10);

  // The convs matter: the same weights read as plain DFlash give other hidden states.
  drafter::DrafterConfig plain = f.c;
  plain.family = dflash::drafter::family_named("dflash", "test");
  plain.family_settings = nullptr;  // DFlash has none
  eval::DrafterContextCache without(plain, f.w);
  without.append(feats);
  EXPECT_GT((without.block_hidden(embeds) - ref).abs().max().item<double>(), 1e-4);
}
