// The families' model and eval hooks (drafter/family_model.h and its registry, drafts_per_cycle,
// has_confidence_cut): a family without a model of its own is the plain DFlash drafter; DSpark's and DFlash2's
// weights are the DFlash backbone's, drawn the same for one seed, followed by their own tensors.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "drafter_config.h"
#include "drafter_weights.h"
#include "family_model.h"
#include "family_registry.h"
#include "tiny_family_config.h"
#include "toy_family.h"

using namespace dflash::drafter;

namespace {

DrafterConfig as_dflash(DrafterConfig c) {
  c.family = dflash::drafter::family_named("dflash", "test");
  return c;
}

// The backbone's tensors of `c` equal those of the same config as family dflash, drawn with the same seed.
void expect_backbone_is_dflashs(const DrafterConfig& c) {
  const DrafterConfig plain = as_dflash(c);
  const auto shapes = drafter_weight_shapes(c), plain_shapes = drafter_weight_shapes(plain);
  ASSERT_GT(shapes.size(), plain_shapes.size()) << family_of(c.family).name() << " adds tensors of its own";
  const auto w = init_drafter_weights(c, at::kDouble, 7).named(), p = init_drafter_weights(plain, at::kDouble, 7).named();
  ASSERT_EQ(w.size(), shapes.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(shapes[i], plain_shapes[i]);
    EXPECT_EQ(w[i].first, p[i].first);
    EXPECT_TRUE(at::equal(w[i].second, p[i].second)) << w[i].first;
  }
  for (size_t i = p.size(); i < w.size(); ++i) {
    EXPECT_EQ(w[i].first, shapes[i].first);
    EXPECT_EQ(w[i].second.sizes().vec(), shapes[i].second) << w[i].first;
  }
}

}  // namespace

TEST(FamilyModelHooks, DFlashAndTheToyFamilyAreThePlainDrafter) {
  dflash::families::testing::register_toy_family();
  EXPECT_EQ(find_family_model(family_named("dflash", "test")), nullptr);
  EXPECT_EQ(find_family_model(family_named("toy", "test")), nullptr);
  const DrafterConfig c = tiny_family_config("DFlashDraftModel");
  WeightShapes extra;
  model_of(c).add_weight_shapes(c, extra);
  EXPECT_TRUE(extra.empty());
  EXPECT_EQ(model_of(c).training(), nullptr);  // trains as DFlash (family_training.h's defaults)
  EXPECT_FALSE(model_of(c).takes_selector_options());
  const DrafterWeights w = init_drafter_weights(c, at::kFloat, 1);
  EXPECT_TRUE(w.heads.empty());
  EXPECT_TRUE(w.convs.empty());
  EXPECT_FALSE(w.selector.hidden_projection.defined());
}

TEST(FamilyModelHooks, DSparkIsTheBackbonePlusItsHeads) {
  const DrafterConfig c = tiny_family_config("Qwen3DSparkModel", nlohmann::json::object(),
                               {{"markov_rank", 4}, {"markov_head_type", "gated"}, {"enable_confidence_head", true},
                                {"confidence_head_with_markov", true}});
  ASSERT_NE(find_family_model(family_of(c.family)), nullptr);
  expect_backbone_is_dflashs(c);
  EXPECT_FALSE(init_drafter_weights(c, at::kFloat, 1).heads.empty());  // kept by name
}

TEST(FamilyModelHooks, DFlash2IsTheBackbonePlusIdentityConvsAndANoOpSelector) {
  const DrafterConfig c = tiny_family_config("DFlash2DraftModel", {{"conv_kernel_size", 2}, {"conv_group_size", 4},
                                                     {"selector_rank", 4}, {"selector_top_k", 4}});
  ASSERT_NE(find_family_model(family_of(c.family)), nullptr);
  EXPECT_TRUE(model_of(c).takes_selector_options());
  expect_backbone_is_dflashs(c);
  const DrafterWeights w = init_drafter_weights(c, at::kDouble, 7);
  ASSERT_EQ(int64_t(w.convs.size()), c.num_hidden_layers);
  EXPECT_EQ(w.selector.successor_codebook.abs().max().item<double>(), 0.0);
  DrafterWeights missing = w;
  missing.convs.clear();
  EXPECT_THROW(model_of(c).check_weights(c, missing, "test"), std::invalid_argument);
}

TEST(FamilyModelHooks, AModelIsRegisteredOncePerFamily) {
  const Family& dspark = family_named("dspark", "test");
  const FamilyModel* m = find_family_model(dspark);
  ASSERT_NE(m, nullptr);
  register_family_model(dspark, *m);  // the same object again: nothing changes
  EXPECT_EQ(find_family_model(dspark), m);
  static const FamilyModel other;
  EXPECT_THROW(register_family_model(dspark, other), std::logic_error);
  EXPECT_EQ(find_family_model(dspark), m);
}

TEST(FamilyModelHooks, EvalTraits) {
  const DrafterConfig c = tiny_family_config("DFlashDraftModel");  // block_size 4
  EXPECT_EQ(family_named("dflash", "test").drafts_per_cycle(c), 3);
  EXPECT_EQ(family_named("dflash2", "test").drafts_per_cycle(c), 3);
  EXPECT_EQ(family_named("dspark", "test").drafts_per_cycle(c), 4);  // every block output is a draft
  for (const Family* f : registered_families())
    EXPECT_EQ(f->has_confidence_cut(), std::string(f->name()) == "dspark") << f->name();
}
