// The CPU decode-attention kernel against a naive fp64 loop: several sequences of different lengths
// (including an empty cache), grouped-query heads, float and double; and the new rows land in the caches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "decode_attention.h"
#include "isa_param.h"

using namespace dflash::kernels;

namespace {

template <typename T>
void check_against_naive(int64_t Hq, int64_t Hkv, int64_t D, std::vector<int64_t> past, double tol) {
  const int64_t B = int64_t(past.size()), cap = 80;
  std::mt19937 rng(42);
  std::normal_distribution<double> nd;
  auto fill = [&](std::vector<T>& v) {
    for (auto& x : v) x = T(nd(rng));
  };
  std::vector<T> q(size_t(B * Hq * D)), kn(size_t(B * Hkv * D)), vn(size_t(B * Hkv * D)), out(size_t(B * Hq * D));
  fill(q), fill(kn), fill(vn);
  std::vector<std::vector<T>> kc(size_t(B), std::vector<T>(size_t(Hkv * cap * D))), vc = kc;
  for (auto& c : kc) fill(c);
  for (auto& c : vc) fill(c);
  const auto kc0 = kc, vc0 = vc;
  std::vector<void*> kp, vp;
  const std::vector<int64_t> sh(size_t(B), cap * D);
  for (int64_t b = 0; b < B; ++b) kp.push_back(kc[size_t(b)].data()), vp.push_back(vc[size_t(b)].data());

  DecodeAttentionArgs a;
  a.dtype = sizeof(T) == 8 ? ScalarType::Float64 : ScalarType::Float32;
  a.batch = B, a.q_heads = Hq, a.kv_heads = Hkv, a.head_dim = D;
  a.q = q.data(), a.q_sb = Hq * D, a.q_sh = D;
  a.k_new = kn.data(), a.v_new = vn.data(), a.new_sb = Hkv * D, a.new_sh = D;
  a.k_cache = kp.data(), a.v_cache = vp.data(), a.cache_sh = sh.data(), a.cache_st = D;
  a.past = past.data();
  a.out = out.data(), a.out_sb = Hq * D, a.out_sh = D;
  a.scale = 1.0 / std::sqrt(double(D));
  ASSERT_EQ(check_decode_attention(a), "");
  decode_attention_cpu(a, 0, 1);  // two calls over disjoint ranges, as parallel callers make them
  decode_attention_cpu(a, 1, B);

  const int64_t rep = Hq / Hkv;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = past[size_t(b)] + 1;
    for (int64_t g = 0; g < Hkv; ++g) {
      // the new row is stored at position past; rows before it are untouched
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(kc[size_t(b)][size_t(g * cap * D + past[size_t(b)] * D + d)], kn[size_t(b * Hkv * D + g * D + d)]);
        EXPECT_EQ(vc[size_t(b)][size_t(g * cap * D + past[size_t(b)] * D + d)], vn[size_t(b * Hkv * D + g * D + d)]);
      }
      for (int64_t t = 0; t < L - 1; ++t)
        EXPECT_EQ(kc[size_t(b)][size_t(g * cap * D + t * D)], kc0[size_t(b)][size_t(g * cap * D + t * D)]);
      for (int64_t r = 0; r < rep; ++r) {
        const int64_t h = g * rep + r;
        std::vector<double> s(static_cast<size_t>(L));
        double m = -INFINITY;
        for (int64_t t = 0; t < L; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q[size_t(b * Hq * D + h * D + d)]) * double(kc[size_t(b)][size_t(g * cap * D + t * D + d)]);
          s[size_t(t)] = dot * a.scale;
          m = std::max(m, s[size_t(t)]);
        }
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - m));
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0;
          for (int64_t t = 0; t < L; ++t) ref += s[size_t(t)] / sum * double(vc[size_t(b)][size_t(g * cap * D + t * D + d)]);
          EXPECT_NEAR(double(out[size_t(b * Hq * D + h * D + d)]), ref, tol) << "b " << b << " h " << h << " d " << d;
        }
      }
    }
  }
}

}  // namespace

class DecodeAttentionPerIsa : public ::testing::TestWithParam<dflash::kernels::CpuIsa> {};

TEST_P(DecodeAttentionPerIsa, MatchesFp64Loop) {
  DFLASH_USE_ISA(GetParam());
  check_against_naive<float>(9, 3, 64, {0, 5, 17, 63}, 2e-5);
  check_against_naive<double>(9, 3, 64, {3, 0, 40}, 1e-12);
  check_against_naive<float>(4, 4, 12, {1, 30}, 2e-5);   // no grouping, head_dim not a vector multiple
  check_against_naive<float>(20, 1, 8, {2, 9}, 2e-5);    // 20 q heads on one KV head: padded to 2 vectors
}

INSTANTIATE_TEST_SUITE_P(Isa, DecodeAttentionPerIsa, dflash::kernels::testing::kEveryIsa,
                         dflash::kernels::testing::isa_label);

TEST(DecodeAttention, ChecksNameTheProblem) {
  DecodeAttentionArgs a;
  a.batch = 1, a.q_heads = 9, a.kv_heads = 2, a.head_dim = 8;
  EXPECT_NE(check_decode_attention(a).find("multiple of kv_heads"), std::string::npos);
  a.kv_heads = 3;
  EXPECT_NE(check_decode_attention(a).find("pointer is missing"), std::string::npos);
  a.dtype = ScalarType::BFloat16;
  EXPECT_NE(check_decode_attention(a).find("float32 or float64"), std::string::npos);
}
