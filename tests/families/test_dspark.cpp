// DSpark in C++: the heads registered in the drafter's weights under DeepSpec's names (shapes per variant, zero
// biases, a save/load round trip, a missing head refused), finite-difference gradients of the heads. Values against
// the fp64 reference: tests/python/test_dspark_heads.py.
#include <memory>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "drafter_config.h"
#include "drafter_weights.h"
#include "dspark_drafter_settings.h"
#include "dspark_heads.h"
#include "family_registry.h"
#include "finite_difference.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;
using dflash::families::dspark_settings;
using dflash::families::DSparkDrafterSettings;

namespace {

DrafterConfig tiny_dspark(int64_t rank, MarkovHeadType type, bool conf, bool with_markov) {
  DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "tiny");
  c.family = dflash::drafter::family_named("dspark", "test");
  DSparkHeads h;
  h.markov_rank = rank;
  h.markov_head_type = type;
  h.enable_confidence_head = conf;
  h.confidence_head_with_markov = with_markov;
  c.family_settings = std::make_shared<const DSparkDrafterSettings>(h);
  return c;
}

std::set<std::string> head_names(const DrafterWeights& w) {
  std::set<std::string> s;
  for (auto& [n, t] : w.named())
    if (n.rfind("markov_head.", 0) == 0 || n.rfind("confidence_head.", 0) == 0) s.insert(n);
  return s;
}

}  // namespace

TEST(DSparkWeights, HeadsCarryDeepSpecNamesAndShapes) {
  const int64_t V = 32, d = 16, r = 4;
  {
    const DrafterWeights w = init_drafter_weights(tiny_dspark(r, MarkovHeadType::Rnn, true, true), at::kFloat, 1);
    EXPECT_EQ(head_names(w), (std::set<std::string>{kMarkovW1, kMarkovW2, kMarkovJointW, kMarkovJointB, kConfidenceW,
                                                    kConfidenceB}));
    const DSparkHeadWeights h = dspark_head_weights(dspark_settings(tiny_dspark(r, MarkovHeadType::Rnn, true, true)), w.named());
    EXPECT_EQ(h.markov_w1.sizes(), at::IntArrayRef({V, r}));
    EXPECT_EQ(h.markov_w2.sizes(), at::IntArrayRef({V, r}));
    EXPECT_EQ(h.joint_w.sizes(), at::IntArrayRef({3 * r, 2 * r + d}));
    EXPECT_EQ(h.conf_w.sizes(), at::IntArrayRef({1, d + r}));
    EXPECT_TRUE(at::equal(h.joint_b, at::zeros({3 * r}))) << "biases start at 0 (HF init)";
    EXPECT_TRUE(at::equal(h.conf_b, at::zeros({1})));
    EXPECT_NEAR(h.markov_w1.std().item<double>(), 0.02, 0.005);
  }
  {
    const DrafterWeights w = init_drafter_weights(tiny_dspark(r, MarkovHeadType::Gated, true, false), at::kFloat, 1);
    EXPECT_EQ(head_names(w), (std::set<std::string>{kMarkovW1, kMarkovW2, kMarkovGateW, kMarkovGateB, kConfidenceW,
                                                    kConfidenceB}));
    const DSparkHeadWeights h = dspark_head_weights(dspark_settings(tiny_dspark(r, MarkovHeadType::Gated, true, false)), w.named());
    EXPECT_EQ(h.gate_w.sizes(), at::IntArrayRef({r, d + r}));
    EXPECT_EQ(h.conf_w.sizes(), at::IntArrayRef({1, d}));
  }
  // rank 0 without the confidence head: DFlash's tensors only
  const DrafterWeights w0 = init_drafter_weights(tiny_dspark(0, MarkovHeadType::Vanilla, false, true), at::kFloat, 1);
  EXPECT_TRUE(head_names(w0).empty());
  EXPECT_EQ(w0.named().size(), init_drafter_weights(parse_drafter_config(tiny_drafter_config_json(), "t"), at::kFloat, 1)
                                   .named().size());
}

TEST(DSparkWeights, SaveLoadRoundTripAndAMissingHeadIsRefused) {
  const DrafterConfig c = tiny_dspark(3, MarkovHeadType::Vanilla, true, true);
  DrafterWeights w = init_drafter_weights(c, at::kFloat, 5);
  const std::string path = testing::TempDir() + "/dspark_heads.safetensors";
  save_drafter_weights(path, w, at::kFloat);
  const DrafterWeights back = load_drafter_weights(c, path, at::kFloat);
  ASSERT_EQ(back.named().size(), w.named().size());
  for (size_t i = 0; i < w.named().size(); ++i) {
    EXPECT_EQ(back.named()[i].first, w.named()[i].first);
    EXPECT_TRUE(at::equal(back.named()[i].second, w.named()[i].second)) << w.named()[i].first;
  }
  // the same file read as a DFlash drafter: the heads are unexpected tensors
  DrafterConfig plain = c;
  plain.family = dflash::drafter::family_named("dflash", "test");
  plain.family_settings = nullptr;  // DFlash has none
  try {
    load_drafter_weights(plain, path, at::kFloat);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor"), std::string::npos) << e.what();
  }
  // a config that needs a gate the file lacks: named
  DrafterConfig gated = c;
  DSparkHeads gate = dspark_settings(c);
  gate.markov_head_type = MarkovHeadType::Gated;
  gated.family_settings = std::make_shared<const DSparkDrafterSettings>(gate);
  try {
    load_drafter_weights(gated, path, at::kFloat);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("markov_head.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(DSparkHeads, FiniteDifferenceGradientsOfEveryVariant) {
  at::manual_seed(2);
  const int64_t n = 2, B = 3, d = 5, V = 7, r = 3;
  for (auto type : {MarkovHeadType::Vanilla, MarkovHeadType::Gated, MarkovHeadType::Rnn}) {
    DSparkHeads h;
    h.markov_rank = r;
    h.markov_head_type = type;
    const at::Tensor prev = at::randint(0, V, {n, B}, at::kLong);
    const at::Tensor gl = at::randn({n, B, V}, at::kDouble), gc = at::randn({n, B}, at::kDouble);
    std::vector<at::Tensor> inputs = {at::randn({n, B, d}, at::kDouble)};
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (auto& [name, shape] : dspark_head_shapes(h, V, d)) {
      named.emplace_back(name, at::randn(shape, at::kDouble) * 0.5);
      inputs.push_back(named.back().second);
    }
    auto f = [&](const std::vector<at::Tensor>& x) {
      std::vector<std::pair<std::string, at::Tensor>> cur;
      for (size_t i = 0; i < named.size(); ++i) cur.emplace_back(named[i].first, x[i + 1]);
      const DSparkHeadWeights w = dspark_head_weights(h, cur);
      return (markov_bias(w, markov_features(h, w, x[0], prev)) * gl).sum() +
             (confidence_logits(h, w, x[0], prev) * gc).sum();
    };
    expect_gradients_match(f, inputs);
  }
}
