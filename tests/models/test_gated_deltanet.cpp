// The gated delta rule (gated_deltanet.h): the chunked form and the recurrent form against a dense float64
// reference written from the definition S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T, o_t = S_t^T q_t,
// for several chunk sizes (1, not dividing T, larger than T), strong decays and a carried-in state; and the
// causal conv with carried state against a direct sum.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "gated_deltanet.h"

using namespace dflash::models;

namespace {

struct Inputs {
  at::Tensor q, k, v, g, beta, s0;
};

Inputs random_inputs(int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv, double max_decay, uint64_t seed) {
  at::manual_seed(seed);
  auto opts = at::TensorOptions().dtype(at::kDouble);
  Inputs in;
  in.q = gdn::l2_normalize(at::randn({B, T, H, Dk}, opts)) / std::sqrt(double(Dk));
  in.k = gdn::l2_normalize(at::randn({B, T, H, Dk}, opts));
  in.v = at::randn({B, T, H, Dv}, opts);
  in.g = -at::rand({B, T, H}, opts) * max_decay;
  in.beta = at::rand({B, T, H}, opts);
  in.s0 = at::randn({B, H, Dk, Dv}, opts);
  return in;
}

// Dense float64 reference, one (batch, head) at a time with explicit matrices.
std::pair<at::Tensor, at::Tensor> dense_reference(const Inputs& in) {
  const int64_t B = in.k.size(0), T = in.k.size(1), H = in.k.size(2), Dk = in.k.size(3), Dv = in.v.size(3);
  at::Tensor o = at::zeros({B, T, H, Dv}, at::kDouble), S_end = at::zeros({B, H, Dk, Dv}, at::kDouble);
  const at::Tensor I = at::eye(Dk, at::kDouble);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      at::Tensor S = in.s0[b][h].clone();
      for (int64_t t = 0; t < T; ++t) {
        const at::Tensor k = in.k[b][t][h].view({Dk, 1});
        const double a = std::exp(in.g[b][t][h].item<double>()), beta = in.beta[b][t][h].item<double>();
        S = a * at::mm(I - beta * at::mm(k, k.t()), S) + beta * at::mm(k, in.v[b][t][h].view({1, Dv}));
        o[b][t][h] = at::mm(in.q[b][t][h].view({1, Dk}), S).view({Dv});
      }
      S_end[b][h] = S;
    }
  return {o, S_end};
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

}  // namespace

TEST(GatedDeltaRule, RecurrentAndChunkedMatchDenseReference) {
  for (int64_t T : {1, 5, 40, 131}) {
    const Inputs in = random_inputs(2, T, 3, 8, 5, 2.0, 10 + uint64_t(T));
    auto [o_ref, s_ref] = dense_reference(in);
    auto [o_rec, s_rec] = gdn::recurrent(in.q, in.k, in.v, in.g, in.beta, in.s0);
    EXPECT_LT(max_diff(o_rec, o_ref), 1e-12) << "T=" << T;
    EXPECT_LT(max_diff(s_rec, s_ref), 1e-12) << "T=" << T;
    for (int64_t C : {1, 7, 16, 64, 500}) {
      auto [o, s] = gdn::chunked(in.q, in.k, in.v, in.g, in.beta, in.s0, C);
      EXPECT_LT(max_diff(o, o_ref), 1e-11) << "T=" << T << " chunk=" << C;
      EXPECT_LT(max_diff(s, s_ref), 1e-11) << "T=" << T << " chunk=" << C;
    }
  }
}

TEST(GatedDeltaRule, StrongDecayUnderflowsCleanly) {
  // exp of a chunk's cumulative decay underflows to 0 (g ~ -60 per token): no inf/nan, same answer.
  const Inputs in = random_inputs(1, 100, 2, 4, 3, 60.0, 3);
  auto [o_ref, s_ref] = dense_reference(in);
  auto [o, s] = gdn::chunked(in.q, in.k, in.v, in.g, in.beta, in.s0);
  EXPECT_TRUE(at::isfinite(o).all().item<bool>());
  EXPECT_LT(max_diff(o, o_ref), 1e-11);
  EXPECT_LT(max_diff(s, s_ref), 1e-11);
}

TEST(GatedDeltaRule, StateCarriesBetweenFormsAndCalls) {
  const Inputs in = random_inputs(2, 90, 2, 6, 4, 1.0, 4);
  auto [o_all, s_all] = gdn::chunked(in.q, in.k, in.v, in.g, in.beta, in.s0);
  // 70 tokens chunked (a full chunk and a partial one), 3 recurrent, 17 chunked.
  auto part = [&](const at::Tensor& x, int64_t a, int64_t n) { return x.narrow(1, a, n); };
  auto run = [&](bool chunk, int64_t a, int64_t n, const at::Tensor& s) {
    return chunk ? gdn::chunked(part(in.q, a, n), part(in.k, a, n), part(in.v, a, n), part(in.g, a, n),
                                part(in.beta, a, n), s)
                 : gdn::recurrent(part(in.q, a, n), part(in.k, a, n), part(in.v, a, n), part(in.g, a, n),
                                  part(in.beta, a, n), s);
  };
  auto [o1, s1] = run(true, 0, 70, in.s0);
  auto [o2, s2] = run(false, 70, 3, s1);
  auto [o3, s3] = run(true, 73, 17, s2);
  EXPECT_LT(max_diff(at::cat({o1, o2, o3}, 1), o_all), 1e-11);
  EXPECT_LT(max_diff(s3, s_all), 1e-11);
  // The state alone (q undefined), as the cache's rollback replays it.
  auto [none, s_only] = gdn::recurrent({}, in.k, in.v, in.g, in.beta, in.s0);
  EXPECT_FALSE(none.defined());
  EXPECT_LT(max_diff(s_only, s_all), 1e-11);
}

TEST(GatedDeltaRule, CausalConvWithStateMatchesDirectSum) {
  at::manual_seed(5);
  const int64_t B = 2, C = 6, T = 11, K = 4;
  const at::Tensor x = at::randn({B, C, T}, at::kDouble), w = at::randn({C, K}, at::kDouble);
  // Direct: y[t] = silu(sum_j w[:, j] x[t - (K-1) + j]), zeros before the sequence.
  at::Tensor ref = at::zeros({B, C, T}, at::kDouble);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t s = t - (K - 1) + j;
      if (s >= 0) ref.select(2, t) += w.select(1, j) * x.select(2, s);
    }
  ref = at::silu(ref);
  const at::Tensor zero = at::zeros({B, C, K - 1}, at::kDouble);
  auto [y, st] = gdn::causal_conv(x, zero, w);
  EXPECT_LT(max_diff(y, ref), 1e-13);
  EXPECT_EQ(max_diff(st, x.narrow(2, T - (K - 1), K - 1)), 0.0);
  // In pieces of 2, 1 and 8 tokens, carrying the state.
  auto [y1, s1] = gdn::causal_conv(x.narrow(2, 0, 2), zero, w);
  EXPECT_EQ(max_diff(s1.narrow(2, 1, 2), x.narrow(2, 0, 2)), 0.0);  // the first K-1-2 entries stay zero
  auto [y2, s2] = gdn::causal_conv(x.narrow(2, 2, 1), s1, w);
  auto [y3, s3] = gdn::causal_conv(x.narrow(2, 3, 8), s2, w);
  EXPECT_LT(max_diff(at::cat({y1, y2, y3}, 2), ref), 1e-13);
  EXPECT_EQ(max_diff(s3, st), 0.0);
  EXPECT_EQ(max_diff(gdn::conv_state_after(s1, x.narrow(2, 2, 9)), st), 0.0);
}

TEST(GatedDeltaRule, ShapeErrorsAreClear) {
  const Inputs in = random_inputs(1, 4, 2, 4, 3, 1.0, 6);
  try {
    gdn::chunked(in.q, in.k, in.v, in.g, in.beta, in.s0.narrow(2, 0, 3));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("state [1, 2, 3, 3]"), std::string::npos) << e.what();
  }
}
