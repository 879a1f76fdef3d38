// The DFlash2 drafter (family dflash2): its weights under z-lab's names, identity init == DFlash bit for bit
// (from the same seed, and from a DFlash drafter's weights), save/load, and gradients into every DFlash2 tensor.
#include <unistd.h>

#include <set>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "block_batch.h"
#include "dflash2_init.h"
#include "dflash2_weight_names.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "error_of.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;

namespace {

DrafterConfig tiny_dflash2() {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"DFlash2DraftModel"};
  j["dflash_config"]["conv_kernel_size"] = 3;
  j["dflash_config"]["conv_group_size"] = 4;
  j["dflash_config"]["selector_rank"] = 6;
  j["dflash_config"]["selector_top_k"] = 5;
  return parse_drafter_config(j, "d2.json");
}

struct Inputs {
  FrozenTarget t;
  at::Tensor features, block_ids, anchors, keep;
};

Inputs inputs(at::ScalarType dtype) {
  at::manual_seed(7);
  const auto opts = at::TensorOptions().dtype(dtype);
  Inputs in;
  in.t.embed = at::randn({32, 16}, opts);
  in.t.lm_head = in.t.embed;
  const int64_t S = 12, N = 3, B = 4;
  in.features = at::randn({1, S, 32}, opts);
  in.anchors = at::tensor({1, 5, 8}, at::kLong).unsqueeze(0);
  in.keep = at::ones({1, N}, at::kBool);
  in.block_ids = at::randint(0, 31, {1, N * B}, at::kLong);
  return in;
}

at::Tensor hidden(const DrafterConfig& c, const DrafterWeights& w, const Inputs& in, CheckpointPolicy ckpt = {}) {
  return drafter_hidden(c, w, in.t, in.features, in.block_ids, in.anchors, in.keep, ckpt, at::Tensor(), at::Tensor(),
                        dflash::ops::AttentionBackend::Reference);
}

}  // namespace

TEST(DFlash2Model, WeightsCarryZlabsNamesAndStartAsIdentityConvsAndANoOpSelector) {
  const DrafterConfig c = tiny_dflash2();
  const DrafterWeights w = init_drafter_weights(c, at::kFloat, 3);
  const auto shapes = drafter_weight_shapes(c);
  const auto named = w.named();
  ASSERT_EQ(named.size(), shapes.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, shapes[i].first);
    EXPECT_TRUE(named[i].second.sizes().equals(shapes[i].second)) << named[i].first;
  }
  // 3 + 11 per layer (DFlash) + 4 per layer + 3 (DFlash2).
  EXPECT_EQ(named.size(), size_t(3 + 2 * 11 + 2 * 4 + 3));
  std::set<std::string> names;
  for (auto& [n, t] : named) names.insert(n);
  EXPECT_TRUE(names.count("layers.1.mlp_conv.kernel_projection.weight"));
  EXPECT_TRUE(names.count("candidate_selector.successor_codebook"));  // bare: no ".weight"
  EXPECT_TRUE(w.convs[1].attention_conv.kernel_projection.eq(0).all().item<bool>());
  EXPECT_TRUE(w.convs[0].mlp_conv.base_kernel.select(1, 0).eq(1).all().item<bool>());
  EXPECT_TRUE(w.convs[0].mlp_conv.base_kernel.slice(1, 1).eq(0).all().item<bool>());
  EXPECT_TRUE(w.selector.successor_codebook.eq(0).all().item<bool>());
  EXPECT_GT(w.selector.predecessor_codebook.abs().sum().item<double>(), 0.0);
  EXPECT_GT(w.selector.hidden_projection.abs().sum().item<double>(), 0.0);
}

TEST(DFlash2Model, InitialisedDFlash2IsItsDFlashBitForBit) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const DrafterConfig c2 = tiny_dflash2(), c1 = dflash_backbone_config(c2);
    const DrafterWeights w1 = init_drafter_weights(c1, dtype, 11, 0.1, 0.1);
    const DrafterWeights w2 = init_drafter_weights(c2, dtype, 11, 0.1, 0.1);  // the same seed: the same backbone
    const auto n1 = w1.named(), n2 = w2.named();
    for (size_t i = 0; i < n1.size(); ++i) EXPECT_TRUE(at::equal(n1[i].second, n2[i].second)) << n1[i].first;
    const Inputs in = inputs(dtype);
    const at::Tensor h1 = hidden(c1, w1, in);
    EXPECT_TRUE(at::equal(h1, hidden(c2, w2, in)));
    EXPECT_TRUE(at::equal(h1, hidden(c2, w2, in, CheckpointPolicy{1})));
    // From a trained DFlash drafter's weights (here: another seed): the same hidden states.
    const DrafterWeights other = init_drafter_weights(c1, dtype, 99, 0.1, 0.1);
    const DrafterWeights from = dflash2_from_dflash(c2, other, dtype, 5);
    EXPECT_TRUE(at::equal(hidden(c1, other, in), hidden(c2, from, in)));
  }
}

TEST(DFlash2Model, GradientsReachEveryDFlash2TensorAndMovedConvsChangeTheOutput) {
  const DrafterConfig c = tiny_dflash2();
  DrafterWeights w = init_drafter_weights(c, at::kDouble, 4, 0.1, 0.1);
  w.set_requires_grad(true);
  const Inputs in = inputs(at::kDouble);
  const at::Tensor h = hidden(c, w, in, CheckpointPolicy{1});
  (h * at::randn_like(h)).sum().backward();
  for (auto& cv : w.convs)
    for (const BlockConvWeights* b : {&cv.attention_conv, &cv.mlp_conv}) {
      ASSERT_TRUE(b->base_kernel.grad().defined());
      EXPECT_GT(b->base_kernel.grad().abs().sum().item<double>(), 0.0);
      EXPECT_GT(b->kernel_projection.grad().abs().sum().item<double>(), 0.0);
    }
  at::NoGradGuard g;
  const DrafterConfig c1 = dflash_backbone_config(c);
  w.convs[0].mlp_conv.base_kernel.select(1, 1).fill_(0.5);
  EXPECT_FALSE(at::allclose(hidden(c, w, in), hidden(c1, w, in)));
}

TEST(DFlash2Model, SavedAndLoadedUnderItsNamesAndADFlashFileIsAStartingPoint) {
  const DrafterConfig c2 = tiny_dflash2(), c1 = dflash_backbone_config(c2);
  const std::string dir = "/tmp/dflash2_model_" + std::to_string(::getpid());
  DrafterWeights w2 = init_drafter_weights(c2, at::kFloat, 1, 0.1, 0.1);
  w2.convs[1].attention_conv.kernel_projection.normal_();
  save_drafter_weights(dir + "_2.safetensors", w2, at::kFloat);
  const DrafterWeights back = load_drafter_weights(c2, dir + "_2.safetensors", at::kFloat);
  const auto a = w2.named(), b = back.named();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;

  const DrafterWeights w1 = init_drafter_weights(c1, at::kFloat, 2, 0.1, 0.1);
  save_drafter_weights(dir + "_1.safetensors", w1, at::kFloat);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { load_drafter_weights(c2, dir + "_1.safetensors", at::kFloat); }),
            dir + "_1.safetensors: tensor 'layers.0.attention_conv.base_kernel' is missing (expected shape [2, 3, 16] "
                  "for this config)");
  const DrafterWeights started = load_dflash_as_dflash2(c2, dir + "_1.safetensors", at::kFloat, 3);
  const Inputs in = inputs(at::kFloat);
  EXPECT_TRUE(at::equal(hidden(c1, w1, in), hidden(c2, started, in)));
  EXPECT_NE(error_of<std::invalid_argument>([&] { dflash2_from_dflash(c2, w2, at::kFloat, 3); }).find("already"),
            std::string::npos);
}
