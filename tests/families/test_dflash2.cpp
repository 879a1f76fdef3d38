// DFlash2 building blocks: the block conv (identity, block locality, gradients), the DFlash2 layer at identity
// init against the DFlash layer bit for bit, the selector's chunked top-K, walk and loss (gradients, modes), and
// the checkpoint names. Values against the fp64 reference: tests/python/test_dflash2_modules.py.
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "candidate_selector.h"
#include "dflash2_layer.h"
#include "dflash2_weight_names.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "dynamic_block_conv.h"
#include "finite_difference.h"
#include "norm_ops.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;

namespace {

at::Tensor randn(std::vector<int64_t> shape, double scale = 1.0) { return at::randn(shape, at::kDouble) * scale; }

BlockConvWeights random_conv(int64_t d, int64_t K, int64_t G, double scale = 0.3) {
  return {randn({2, K, d}, scale), randn({2 * K * (d / G), d}, scale)};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BlockConv, IdentityInitReturnsItsInputExactly) {
  at::manual_seed(0);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    const at::Tensor u = at::randn({2, 8, 16}).to(dtype);
    const BlockConvWeights w = identity_block_conv(16, 3, 4, dtype);
    const at::Tensor y = conv_wrapped_sublayer(u, w, {4, 4}, [](const at::Tensor& h) { return at::tanh(h); });
    EXPECT_TRUE(at::equal(y, at::tanh(u))) << dtype;
  }
}

TEST(BlockConv, TapsStayInsideTheirBlock) {
  // Changing one block's tokens changes no other block's output.
  at::manual_seed(1);
  const int64_t d = 8, B = 4;
  const BlockConvWeights w = random_conv(d, 3, 2);
  const at::Tensor u = randn({1, 3 * B, d});
  at::Tensor u2 = u.clone();
  u2.narrow(1, B, B).add_(1.0);
  const BlockConvShape s{2, B};
  auto f = [](const at::Tensor& h) { return h * h; };
  const at::Tensor y = conv_wrapped_sublayer(u, w, s, f), y2 = conv_wrapped_sublayer(u2, w, s, f);
  EXPECT_TRUE(at::equal(y.narrow(1, 0, B), y2.narrow(1, 0, B)));
  EXPECT_TRUE(at::equal(y.narrow(1, 2 * B, B), y2.narrow(1, 2 * B, B)));
  EXPECT_FALSE(at::equal(y.narrow(1, B, B), y2.narrow(1, B, B)));
}

TEST(BlockConv, GradientsMatchFiniteDifferences) {
  at::manual_seed(2);
  const int64_t d = 8, K = 2, G = 4, B = 3;
  const at::Tensor Ws = randn({d, d}, 0.4), gy = randn({2, 2 * B, d});
  const BlockConvWeights w0 = random_conv(d, K, G);
  expect_gradients_match(
      [&](const std::vector<at::Tensor>& in) {
        const BlockConvWeights w{in[1], in[2]};
        const at::Tensor y = conv_wrapped_sublayer(in[0], w, {G, B}, [&](const at::Tensor& h) {
          return at::tanh(at::linear(h, Ws));
        });
        return (y * gy).sum();
      },
      {randn({2, 2 * B, d}), w0.base_kernel, w0.kernel_projection});
}

TEST(BlockConv, KernelLongerThanTheBlockOnlyReadsTheBlock) {
  at::manual_seed(3);
  const int64_t d = 4, B = 2;
  const BlockConvWeights w = random_conv(d, 4, 2);
  BlockConvWeights cut{w.base_kernel.narrow(1, 0, B).contiguous(), at::Tensor()};
  // The same projection rows for the taps that exist: rows are (side, tap, group).
  cut.kernel_projection = w.kernel_projection.view({2, 4, d / 2, d}).narrow(1, 0, B).reshape({-1, d});
  const at::Tensor u = randn({1, 3 * B, d});
  auto f = [](const at::Tensor& h) { return h.sin(); };
  EXPECT_TRUE(at::allclose(conv_wrapped_sublayer(u, w, {2, B}, f), conv_wrapped_sublayer(u, cut, {2, B}, f), 0, 1e-14));
}

TEST(BlockConv, BadShapesAreRefusedWithTheirName) {
  const BlockConvWeights w = identity_block_conv(8, 2, 4, at::kDouble);
  const at::Tensor u = at::zeros({1, 8, 8}, at::kDouble);
  auto same = [](const at::Tensor& h) { return h; };
  EXPECT_NE(error_of([&] { conv_wrapped_sublayer(at::zeros({1, 6, 8}, at::kDouble), w, {4, 4}, same); })
                .find("multiple of the block size 4"), std::string::npos);
  EXPECT_NE(error_of([&] { conv_wrapped_sublayer(u, w, {3, 4}, same); }).find("must divide the hidden size 8"),
            std::string::npos);
  BlockConvWeights bad = w;
  bad.kernel_projection = at::zeros({7, 8}, at::kDouble);
  EXPECT_NE(error_of([&] { conv_wrapped_sublayer(u, bad, {4, 4}, same); }).find("kernel_projection.weight must be [8, 8]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { identity_block_conv(8, 0, 4, at::kDouble); }).find("kernel size >= 1"), std::string::npos);
}

namespace {

struct TinyLayer {
  DrafterConfig c;
  DrafterWeights w;
  LayerShared sh;
  at::Tensor x;
};

TinyLayer tiny_layer(at::ScalarType dtype) {
  at::manual_seed(4);
  TinyLayer t{parse_drafter_config(tiny_drafter_config_json(), "tiny"), {}, {}, {}};
  t.w = init_drafter_weights(t.c, dtype, 5, 0.3, 0.1);
  const int64_t b = 2, S = 11, N = 3, B = t.c.block_size, H = t.c.hidden_size;
  const at::Tensor anchors = at::tensor({1, 4, 8, 0, 5, 9}, at::kLong).view({b, N});
  const at::Tensor keep = at::tensor({1, 1, 1, 1, 0, 1}, at::kLong).to(at::kBool).view({b, N});
  const auto [block_pos, ctx_pos] = rope_positions(anchors, S, B);
  const at::Tensor key_pos = at::cat({ctx_pos, block_pos}, 1);
  const auto rope = drafter_rope(t.c, key_pos);
  auto [q_cos, q_sin] = rope_tables(block_pos, rope, dtype);
  auto [k_cos, k_sin] = rope_tables(key_pos, rope, dtype);
  t.sh = LayerShared{at::randn({b, S, H}).to(dtype), q_cos, q_sin, k_cos, k_sin, anchors, keep, at::Tensor()};
  t.x = at::randn({b, N * B, H}).to(dtype);
  return t;
}

DecoderLayerShape shape_of(const DrafterConfig& c, int64_t layer) {
  return {c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.block_size, c.window_for_layer(layer),
          c.rms_norm_eps, dflash::ops::AttentionBackend::Reference};
}

}  // namespace

TEST(DFlash2Layer, IdentityInitIsTheDFlashLayerBitForBit) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const TinyLayer t = tiny_layer(dtype);
    const int64_t H = t.c.hidden_size;
    const LayerConvWeights conv{identity_block_conv(H, 2, 4, dtype), identity_block_conv(H, 2, 4, dtype)};
    for (int64_t i = 0; i < t.c.num_hidden_layers; ++i) {
      const at::Tensor dflash = decoder_layer(t.w.layers[size_t(i)], shape_of(t.c, i), t.x, t.sh);
      const at::Tensor dflash2 = dflash2_decoder_layer(t.w.layers[size_t(i)], conv, shape_of(t.c, i), 4, t.x, t.sh);
      EXPECT_TRUE(at::equal(dflash, dflash2)) << "layer " << i << " " << dtype;
    }
  }
}

TEST(DFlash2Layer, IsTheConvWrappedSublayersOfTheDFlashLayer) {
  // The layer as its definition: residuals outside, both convs around each sublayer, conv kernels from the
  // normed sublayer input; and with random convs it differs from DFlash.
  const TinyLayer t = tiny_layer(at::kDouble);
  const int64_t H = t.c.hidden_size;
  at::manual_seed(6);
  const LayerConvWeights conv{random_conv(H, 2, 4), random_conv(H, 2, 4)};
  const LayerWeights& w = t.w.layers[1];
  const DecoderLayerShape s = shape_of(t.c, 1);
  const BlockConvShape cs{4, s.block_size};
  const at::Tensor y = dflash2_decoder_layer(w, conv, s, 4, t.x, t.sh);
  const at::Tensor x2 = t.x + conv_wrapped_sublayer(rms_norm(t.x, w[kInputNorm], s.eps), conv.attention_conv, cs,
                                                    [&](const at::Tensor& h) { return attention_sublayer(w, s, h, t.sh); });
  const at::Tensor want = x2 + conv_wrapped_sublayer(rms_norm(x2, w[kPostNorm], s.eps), conv.mlp_conv, cs,
                                                     [&](const at::Tensor& h) { return mlp_sublayer(w, h); });
  EXPECT_TRUE(at::equal(y, want));
  EXPECT_GT((y - decoder_layer(w, s, t.x, t.sh)).abs().max().item<double>(), 1e-3);
}

TEST(DFlash2Layer, GradientsMatchFiniteDifferences) {
  const TinyLayer t = tiny_layer(at::kDouble);
  const int64_t H = t.c.hidden_size;
  at::manual_seed(7);
  const LayerConvWeights conv0{random_conv(H, 2, 8, 0.2), random_conv(H, 2, 8, 0.2)};
  const at::Tensor gy = randn(t.x.sizes().vec());
  const LayerWeights& w = t.w.layers[0];
  // The input x too: its gradient runs through both convs and the kernels computed from it.
  expect_directional_gradients_match(
      [&](const std::vector<at::Tensor>& in) {
        const LayerConvWeights conv{{in[0], in[1]}, {in[2], in[3]}};
        return (dflash2_decoder_layer(w, conv, shape_of(t.c, 0), 8, in[4], t.sh) * gy).sum();
      },
      {conv0.attention_conv.base_kernel, conv0.attention_conv.kernel_projection, conv0.mlp_conv.base_kernel,
       conv0.mlp_conv.kernel_projection, t.x},
      4, 1e-6, 1e-6);
}

// ---- selector ----------------------------------------------------------------------------------------------

namespace {

SelectorWeights random_selector(int64_t V, int64_t d, int64_t r, double scale = 0.5) {
  return {randn({r, d}, scale), randn({V, r}, scale), randn({V, r}, scale)};
}

}  // namespace

TEST(Selector, ChunkedTopKIsTheFullSortWithTiesToTheLowerId) {
  // Small integers in fp64: every logit is an exact integer whatever order a GEMM sums in and whichever chunk a
  // head row falls in, so equal head rows give equal logits on every CPU and BLAS (a GEMM of random values need
  // not: an AVX2 GEMM rounded equal rows apart). The tie rule is then tested on ties that are ties by construction.
  at::manual_seed(8);
  const int64_t V = 23, d = 5;
  const auto small_ints = [](std::vector<int64_t> shape) { return at::randint(-3, 4, shape, at::kDouble); };
  at::Tensor head = small_ints({V, d});
  head[17] = head[3];  // exact ties across chunks
  head[9] = head[3];
  head[12] = head[11];  // and inside one
  const at::Tensor h = small_ints({4, 3, d});
  const at::Tensor full = at::matmul(h, head.t());
  ASSERT_TRUE(at::equal(full, at::round(full)));  // exact: the reference below sorts the true logits
  const auto [v, i] = at::sort(full, true, -1, true);
  for (int64_t chunk : {1, 4, 7, 23, 100})
    for (int64_t K : {1, 5, 23}) {
      const Candidates c = top_candidates(h, head, K, {}, chunk);
      EXPECT_TRUE(at::equal(c.ids, i.narrow(-1, 0, K))) << "chunk " << chunk << " K " << K;
      EXPECT_TRUE(at::equal(c.logits, v.narrow(-1, 0, K))) << "chunk " << chunk << " K " << K;
    }
  // Every logit equal: ties at every boundary, the lowest ids win whatever the chunking.
  const at::Tensor flat_head = small_ints({1, d}).expand({V, d}).contiguous();
  for (int64_t chunk : {1, 4, 7, 100})
    EXPECT_TRUE(at::equal(top_candidates(h, flat_head, 5, {}, chunk).ids,
                          at::arange(5, at::kLong).expand({4, 3, 5})))
        << "chunk " << chunk;
  // The unary transform: output multiplier and softcap.
  const UnaryLogitOptions opt{0.5, 2.0};
  const Candidates c = top_candidates(h, head, 4, opt, 5);
  EXPECT_TRUE(at::allclose(c.logits, at::tanh(v.narrow(-1, 0, 4) * 0.25) * 2.0,
                           0, 1e-12));
  EXPECT_NE(error_of([&] { top_candidates(h, head, 24); }).find("selector_top_k must be in [1, 23], got 24"),
            std::string::npos);
}

TEST(Selector, CandidateLogitsGradientMatchesFiniteDifferences) {
  at::manual_seed(9);
  const at::Tensor head = randn({13, 6}), ids = at::randint(0, 13, {5, 4}, at::kLong), g = randn({5, 4});
  expect_gradients_match(
      [&](const std::vector<at::Tensor>& in) {
        return (candidate_unary_logits(in[0], head, ids, {1.5, 3.0}) * g).sum();
      },
      {randn({5, 6})});
  EXPECT_NE(error_of([&] { candidate_unary_logits(randn({5, 6}), head.clone().requires_grad_(true), ids); }).find("frozen"),
            std::string::npos);
}

TEST(Selector, ZeroSuccessorCodebookScoresAreTheUnaryLogits) {
  at::manual_seed(10);
  const int64_t V = 17, d = 6, K = 4;
  SelectorWeights w = random_selector(V, d, 3);
  w.successor_codebook.zero_();
  const at::Tensor head = randn({V, d}), h = randn({2, 5, d});
  const Candidates c = top_candidates(h, head, K);
  const SelectorWalk walk = selector_walk(w, c, h, at::tensor({3, 8}, at::kLong));
  EXPECT_TRUE(at::equal(walk.scores, c.logits));
  EXPECT_TRUE(at::equal(walk.path, c.ids.select(-1, 0)));  // the unary argmax
}

TEST(Selector, SampledWalkWithExtremeUniformsPicksTheEnds) {
  at::manual_seed(11);
  const int64_t V = 17, d = 6, K = 4, n = 2, L = 3;
  const SelectorWeights w = random_selector(V, d, 3);
  const at::Tensor head = randn({V, d}), h = randn({n, L, d});
  const Candidates c = top_candidates(h, head, K);
  const SelectorWalk lo = selector_walk(w, c, h, at::tensor({1, 2}, at::kLong), 0.7, at::zeros({n, L}, at::kDouble));
  EXPECT_TRUE(at::equal(lo.path, c.ids.select(-1, 0)));  // u = 0: the first candidate with q > 0
  EXPECT_TRUE(at::allclose(lo.q.sum(-1), at::ones({n, L}, at::kDouble)));
  const SelectorWalk hi = selector_walk(w, c, h, at::tensor({1, 2}, at::kLong), 0.7, at::full({n, L}, 1.0 - 1e-15, at::kDouble));
  EXPECT_TRUE(at::equal(hi.path, c.ids.select(-1, K - 1)));
  EXPECT_NE(error_of([&] { selector_walk(w, c, h, at::tensor({1, 2}, at::kLong), 0.7); }).find("uniforms [n, L]"),
            std::string::npos);
}

namespace {

struct LossCase {
  at::Tensor head, hidden, preds, targets, weights;
};

LossCase loss_case(int64_t V, int64_t d, int64_t n) {
  LossCase c{randn({V, d}), randn({n, d}), at::randint(0, V, {n}, at::kLong), at::randint(0, V, {n}, at::kLong),
             at::rand({n}, at::kDouble)};
  c.weights[0] = 0.0;  // a slot-0 row: skipped
  return c;
}

}  // namespace

TEST(Selector, LossGradientsMatchFiniteDifferencesInBothModes) {
  at::manual_seed(12);
  const int64_t V = 19, d = 5, r = 3, n = 7;
  const LossCase lc = loss_case(V, d, n);
  const SelectorWeights w0 = random_selector(V, d, r);
  for (auto mode : {SelectorCandidates::Inject, SelectorCandidates::Strict}) {
    SelectorLossOptions opt;
    opt.top_k = 4;
    opt.candidates = mode;
    opt.vocab_chunk = 6;
    opt.unary = {1.2, 4.0};
    expect_gradients_match(
        [&](const std::vector<at::Tensor>& in) {
          const SelectorWeights w{in[1], in[2], in[3]};
          return selector_loss(selector_loss_terms(w, in[0], lc.head, lc.preds, lc.targets, lc.weights, opt));
        },
        {lc.hidden, w0.hidden_projection, w0.predecessor_codebook, w0.successor_codebook});
  }
}

TEST(Selector, StopGradientKeepsTheHiddenStatesOutOfTheSelectorLoss) {
  at::manual_seed(13);
  const LossCase lc = loss_case(19, 5, 7);
  const SelectorWeights w0 = random_selector(19, 5, 3);
  SelectorLossOptions opt;
  opt.top_k = 4;
  opt.candidates = SelectorCandidates::Inject;  // every row counts: random targets mostly miss the top-K
  auto grads = [&](bool stop) {
    opt.stop_gradient = stop;
    const at::Tensor h = lc.hidden.clone().requires_grad_(true), A = w0.predecessor_codebook.clone().requires_grad_(true);
    const SelectorWeights w{w0.hidden_projection, A, w0.successor_codebook};
    const at::Tensor loss = selector_loss(selector_loss_terms(w, h, lc.head, lc.preds, lc.targets, lc.weights, opt));
    const auto g = torch::autograd::grad({loss}, {h, A}, {}, false, false, true);
    return std::make_pair(loss.item<double>(), g);
  };
  const auto [plain_loss, plain] = grads(false);
  const auto [stop_loss, stopped] = grads(true);
  EXPECT_EQ(plain_loss, stop_loss);
  EXPECT_GT(plain[0].abs().max().item<double>(), 0.0);
  EXPECT_FALSE(stopped[0].defined() && stopped[0].abs().max().item<double>() > 0);
  EXPECT_TRUE(at::equal(plain[1], stopped[1]));
}

TEST(Selector, StrictDropsMissesAndInjectCountsThem) {
  at::manual_seed(14);
  const int64_t V = 30, d = 4, n = 40;
  const LossCase lc = loss_case(V, d, n);
  const SelectorWeights w = random_selector(V, d, 3);
  SelectorLossOptions opt;
  opt.top_k = 3;
  opt.candidates = SelectorCandidates::Inject;
  const auto inj = selector_loss_terms(w, lc.hidden, lc.head, lc.preds, lc.targets, lc.weights, opt);
  opt.candidates = SelectorCandidates::Strict;
  const auto str = selector_loss_terms(w, lc.hidden, lc.head, lc.preds, lc.targets, lc.weights, opt);
  EXPECT_EQ(inj.rows.item<double>(), n - 1);
  EXPECT_DOUBLE_EQ(inj.covered_weight.item<double>(), lc.weights.sum().item<double>());
  EXPECT_LT(str.covered_weight.item<double>(), inj.covered_weight.item<double>());  // random targets miss
  EXPECT_GT(str.recall_hits.item<double>(), 0.0);
  EXPECT_EQ(inj.recall_hits.item<double>(), str.recall_hits.item<double>());
  EXPECT_EQ(inj.selector_hits.item<double>(), str.selector_hits.item<double>());
  EXPECT_NE(error_of([&] {
              selector_loss_terms(w, lc.hidden, lc.head, lc.preds, lc.targets + V, lc.weights, opt);
            }).find("token ids must be in [0, 30)"),
            std::string::npos);
}

// ---- names -------------------------------------------------------------------------------------------------

TEST(DFlash2Names, ZLabFixtureHas81TensorsWithTheseNamesAndShapes) {
  // docs/DFLASH2.md: the z-lab fixture (d 6656, 5 layers, K_conv 2, G 16, r 256, V 202048) has 81 tensors,
  // DFlash's 58 and these 23.
  auto cfg = tiny_drafter_config_json();
  cfg["hidden_size"] = 6656;
  cfg["num_hidden_layers"] = 5;
  cfg["num_attention_heads"] = 52;
  cfg["num_key_value_heads"] = 4;
  cfg["head_dim"] = 128;
  cfg["vocab_size"] = 202048;
  cfg["num_target_layers"] = 64;
  cfg["layer_types"] = std::vector<std::string>(5, "full_attention");
  cfg["dflash_config"]["mask_token_id"] = 1;
  cfg["dflash_config"]["target_layer_ids"] = {1, 16, 31, 46, 61};
  const auto dflash = drafter_weight_shapes(parse_drafter_config(cfg, "fixture"));
  const auto extra = dflash2_extra_weight_shapes({5, 6656, 202048, 2, 16, 256});
  std::set<std::string> names;
  for (const auto& [n, s] : dflash) names.insert(n);
  for (const auto& [n, s] : extra) names.insert(n);
  EXPECT_EQ(dflash.size(), 58u);
  EXPECT_EQ(extra.size(), 23u);
  EXPECT_EQ(names.size(), 81u);
  EXPECT_EQ(extra[0].first, "layers.0.attention_conv.base_kernel");
  EXPECT_EQ(extra[0].second, (std::vector<int64_t>{2, 2, 6656}));
  EXPECT_EQ(extra[1].first, "layers.0.attention_conv.kernel_projection.weight");
  EXPECT_EQ(extra[1].second, (std::vector<int64_t>{1664, 6656}));
  EXPECT_EQ(extra[3].first, "layers.0.mlp_conv.kernel_projection.weight");
  EXPECT_EQ(extra[19].first, "layers.4.mlp_conv.kernel_projection.weight");
  EXPECT_EQ(extra[20].first, "candidate_selector.hidden_projection.weight");
  EXPECT_EQ(extra[20].second, (std::vector<int64_t>{256, 6656}));
  EXPECT_EQ(extra[21].first, "candidate_selector.predecessor_codebook");
  EXPECT_EQ(extra[22].first, "candidate_selector.successor_codebook");
  EXPECT_EQ(extra[22].second, (std::vector<int64_t>{202048, 256}));
  EXPECT_NE(error_of([] { dflash2_extra_weight_shapes({5, 6656, 202048, 2, 15, 256}); })
                .find("conv_group_size 15 must divide hidden_size 6656"),
            std::string::npos);
}

TEST(DFlash2Layer, CheckpointedLayerGivesTheSameOutputAndGradients) {
  const TinyLayer t = tiny_layer(at::kDouble);
  const int64_t H = t.c.hidden_size;
  at::manual_seed(15);
  const LayerConvWeights conv0{random_conv(H, 2, 4), random_conv(H, 3, 4)};
  const at::Tensor gy = randn(t.x.sizes().vec());
  const DecoderLayerShape s = shape_of(t.c, 0);
  auto run = [&](bool checkpointed) {
    std::vector<at::Tensor> leaves = {t.x.clone().requires_grad_(true)};
    LayerWeights w = t.w.layers[0];
    for (auto& p : w.t) leaves.push_back(p = p.clone().requires_grad_(true));
    LayerConvWeights conv = conv0;
    for (auto* p : {&conv.attention_conv.base_kernel, &conv.attention_conv.kernel_projection,
                    &conv.mlp_conv.base_kernel, &conv.mlp_conv.kernel_projection})
      leaves.push_back(*p = p->clone().requires_grad_(true));
    const at::Tensor y = checkpointed ? checkpointed_dflash2_decoder_layer(w, conv, s, 4, leaves[0], t.sh)
                                      : dflash2_decoder_layer(w, conv, s, 4, leaves[0], t.sh);
    (y * gy).sum().backward();
    std::vector<at::Tensor> out = {y.detach()};
    for (const auto& l : leaves) out.push_back(l.grad());
    return out;
  };
  const auto plain = run(false), ckpt = run(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(plain[i].defined() && ckpt[i].defined()) << i;
    EXPECT_TRUE(at::allclose(plain[i], ckpt[i], 0, 1e-12)) << "output/grad " << i;
  }
}
