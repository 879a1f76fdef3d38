// gpt-oss's parts against references written out in float64: MXFP4 dequantisation on hand-picked codes and
// scales (the extremes of the scale byte included), the biased top-k-then-softmax router with the clamped
// SwiGLU experts (moe_block.h, MoeRouter::topk_softmax, MoeExperts::clamped_swiglu) against a dense all-experts
// pass, sink attention with and without a sliding window against a per-query loop, and the presets' parameter counts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "moe_block.h"
#include "mxfp4.h"
#include "sink_attention.h"
#include "target_cost.h"
#include "target_presets.h"

using namespace dflash::models;

TEST(Mxfp4, DequantisesCodesTimesPowersOfTwo) {
  const double codes[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  at::Tensor blocks = at::randint(0, 256, {2, 3, 16}, at::kByte);
  const at::Tensor scales = at::tensor({127, 0, 254, 100, 130, 1}, at::kByte).view({2, 3});
  const at::Tensor got = mxfp4_dequantize(blocks, scales, "w");
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 96}));
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  auto b = blocks.accessor<uint8_t, 3>();
  auto s = scales.accessor<uint8_t, 2>();
  auto g = got.accessor<float, 2>();
  for (int r = 0; r < 2; ++r)
    for (int grp = 0; grp < 3; ++grp)
      for (int j = 0; j < 32; ++j) {
        const uint8_t byte = b[r][grp][j / 2];
        const double v = codes[j % 2 ? byte >> 4 : byte & 15] * std::pow(2.0, int(s[r][grp]) - 127);
        ASSERT_EQ(g[r][grp * 32 + j], float(v)) << r << " " << grp << " " << j;
      }
  EXPECT_THROW(mxfp4_dequantize(blocks, scales.narrow(1, 0, 2), "w"), std::runtime_error);
  // 255 is E8M0's NaN: refused, naming the scales tensor and the byte's index (it used to dequantise to nan/inf)
  at::Tensor nan_scales = scales.clone();
  nan_scales[1][2] = 255;
  try {
    mxfp4_dequantize(blocks, nan_scales, "w");
    ADD_FAILURE() << "a scale byte of 255 was dequantised";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "target weights: MXFP4 tensor 'w_scales' holds the byte 255 at [1, 2] (NaN in "
                                     "E8M0, the scales' format): the checkpoint is damaged");
  }
  EXPECT_THROW(mxfp4_dequantize(blocks.to(at::kFloat), scales, "w"), std::runtime_error);
}

TEST(GptOssMoe, EqualsDenseAllExpertsReference) {
  at::manual_seed(5);
  const int64_t E = 6, H = 16, I = 10;
  auto o = at::TensorOptions().dtype(at::kDouble);
  for (int64_t k : {1, 2, 6}) {
    MoeConfig c;
    c.num_experts = E, c.top_k = k, c.expert_intermediate = I;
    c.router = MoeRouter::topk_softmax, c.experts = MoeExperts::clamped_swiglu;
    MoeWeights w;
    w.router = at::randn({E, H}, o), w.router_bias = at::randn({E}, o);
    w.gate_up = 4 * at::randn({E, 2 * I, H}, o) / std::sqrt(double(H));  // large: the clamps at 7 are reached
    w.gate_up_bias = at::randn({E, 2 * I}, o), w.down = at::randn({E, H, I}, o), w.down_bias = at::randn({E, H}, o);
    const at::Tensor x = at::randn({25, H}, o);
    // dense: every expert on every token, weighted by softmax over the k largest logits (0 elsewhere)
    const at::Tensor logits = at::matmul(x, w.router.t()) + w.router_bias;
    const at::Tensor kth = std::get<0>(at::sort(logits, -1, true)).narrow(-1, k - 1, 1);
    const at::Tensor picked = logits >= kth;
    const at::Tensor weights = at::exp(logits - std::get<0>(logits.max(-1, true))) * picked;
    const at::Tensor p = weights / weights.sum(-1, true);
    at::Tensor ref = at::zeros_like(x);
    bool clamped = false;
    for (int64_t e = 0; e < E; ++e) {
      const at::Tensor gu = at::matmul(x, w.gate_up[e].t()) + w.gate_up_bias[e];
      const at::Tensor gate = gu.narrow(1, 0, I), up = gu.narrow(1, I, I);
      clamped |= gate.max().item<double>() > 7 || up.abs().max().item<double>() > 7;
      const at::Tensor g = at::minimum(gate, at::full_like(gate, 7.0)), u = up.clamp(-7, 7);
      const at::Tensor act = (u + 1) * g / (1 + at::exp(-1.702 * g));
      ref = ref + p.select(1, e).unsqueeze(1) * (at::matmul(act, w.down[e].t()) + w.down_bias[e]);
    }
    EXPECT_TRUE(clamped);
    const at::Tensor got = moe_forward(w, c, x);
    EXPECT_LT((got - ref).abs().max().item<double>(), 1e-10 * ref.abs().max().item<double>()) << "k=" << k;
  }
}

TEST(SinkAttention, EqualsPerQueryLoop) {
  at::manual_seed(6);
  auto o = at::TensorOptions().dtype(at::kDouble);
  const int64_t B = 2, Hq = 4, Hkv = 2, D = 8, past = 5, T = 9;
  const at::Tensor q = at::randn({B, Hq, T, D}, o), k = at::randn({B, Hkv, past + T, D}, o),
                   v = at::randn({B, Hkv, past + T, D}, o), sinks = at::randn({Hq}, o);
  for (int64_t window : {0, 1, 4, 100}) {
    const at::Tensor got = sink_attention(q, k, v, sinks, past, window);
    ASSERT_EQ(got.sizes(), q.sizes());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t pos = past + t, lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
          const at::Tensor kk = k[b][h / 2].narrow(0, lo, pos + 1 - lo), vv = v[b][h / 2].narrow(0, lo, pos + 1 - lo);
          const at::Tensor s = at::matmul(kk, q[b][h][t]) / std::sqrt(double(D));
          const at::Tensor e = at::exp(s);
          const at::Tensor ref = at::matmul(e, vv) / (e.sum() + at::exp(sinks[h]));
          ASSERT_LT((got[b][h][t] - ref).abs().max().item<double>(), 1e-12) << window << " " << b << h << t;
        }
  }
}

TEST(GptOssCost, PresetsCountAllExpertsForMemoryAndActiveOnesForFlops) {
  // The published totals: gpt-oss-20b 20.9B, gpt-oss-120b 116.8B parameters; 3.6B and 5.1B active, counting the
  // LM head (not the embedding) with the attention and 4 experts per layer.
  for (auto [name, total, active] : {std::tuple{"gpt-oss-20b", 20.9, 3.6}, std::tuple{"gpt-oss-120b", 116.8, 5.1}}) {
    const TargetConfig c = target_preset(name);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_NEAR(double(target_params(c)) / 1e9, total, 0.1) << name;
    EXPECT_NEAR(target_forward_flops(c, 1, true).total() / 2 / 1e9, active, 0.1) << name;
    // a sliding layer counts at most 128 keys per query: at 4096 tokens far less than a full one
    const TargetFlops slide = target_layer_forward_flops(c, 0, 4096), full = target_layer_forward_flops(c, 1, 4096);
    EXPECT_NEAR(slide.attention / full.attention, (128.0 * 129 / 2 + (4096 - 128) * 128.0) / (4096.0 * 4097 / 2), 1e-9);
  }
}
