// The framework-free CPU kernel against a naive fp64 implementation written from the docs/DFLASH.md mask
// formula (not from anchor_mask.h), forward and backward, through the kernel API alone, for every
// instruction-set build (isa_param.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "anchor_attention.h"
#include "isa_param.h"

namespace {

using dflash::kernels::AnchorAttentionArgs;

// ctx: how blocks' context starts are given: none (null: 0), packed (the row holds documents; anchors lie
// inside them and ctx_start is the anchor's document start) or arbitrary values in [0, S].
enum class Ctx { None, Packed, Arbitrary };

struct Case {
  int64_t batch, S, N, B, Hq, Hkv, D, window;
  Ctx ctx = Ctx::None;
};

struct Data {
  Case c;
  std::vector<double> q, k, v, dout;
  std::vector<int64_t> anchors, ctx_start;  // ctx_start empty for Ctx::None
  std::vector<uint8_t> keep;  // bool storage
  int64_t Tq() const { return c.N * c.B; }
  int64_t Tk() const { return c.S + c.N * c.B; }
};

Data make_data(const Case& c, uint64_t seed) {
  Data d{c, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  const auto fill = [&](std::vector<double>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = normal(rng);
  };
  fill(d.q, c.batch * d.Tq() * c.Hq * c.D);
  fill(d.k, c.batch * d.Tk() * c.Hkv * c.D);
  fill(d.v, c.batch * d.Tk() * c.Hkv * c.D);
  fill(d.dout, c.batch * d.Tq() * c.Hq * c.D);
  std::uniform_int_distribution<int64_t> anchor(0, c.S);
  for (int64_t i = 0; i < c.batch * c.N; ++i) {
    d.anchors.push_back(i % 5 == 0 ? 0 : (i % 7 == 0 ? c.S : anchor(rng)));
    d.keep.push_back(i % 4 != 3);
    if (c.ctx == Ctx::Arbitrary) d.ctx_start.push_back(i % 6 == 1 ? c.S : anchor(rng));
  }
  if (c.ctx == Ctx::Packed) {
    // Documents of random lengths cover [0, S); each anchor is moved into a random document and the block's
    // context starts at that document's first token (so a block sees only its own document).
    for (int64_t b = 0; b < c.batch; ++b) {
      std::vector<int64_t> starts{0};
      std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, c.S / 3));
      while (starts.back() + 1 < c.S) starts.push_back(std::min(c.S, starts.back() + len(rng)));
      if (starts.back() == c.S) starts.pop_back();
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t doc = size_t(rng() % starts.size());
        const int64_t lo = starts[doc], hi = doc + 1 < starts.size() ? starts[doc + 1] : c.S;
        d.anchors[size_t(b * c.N + n)] = lo + int64_t(rng() % uint64_t(hi - lo));
        d.ctx_start.push_back(lo);
      }
    }
  }
  return d;
}

// docs/DFLASH.md: ((kv < S) & (kv < anchor[qb])) | ((kv >= S) & ((kv-S)//B == qb)), and keep[qb]; with a
// window, context kv >= anchor + j - (window-1) and causal inside the block.
bool visible(const Data& d, int64_t b, int64_t row, int64_t kv) {
  const Case& c = d.c;
  const int64_t qb = row / c.B, j = row % c.B, a = d.anchors[b * c.N + qb];
  if (!d.keep[b * c.N + qb]) return false;
  const int64_t start = d.ctx_start.empty() ? 0 : d.ctx_start[b * c.N + qb];
  bool ctx = kv < c.S && kv < a && kv >= start;
  bool blk = kv >= c.S && (kv - c.S) / c.B == qb;
  if (c.window > 0) {
    ctx = ctx && kv >= a + j - (c.window - 1);
    blk = blk && (kv - c.S) % c.B <= j;
  }
  return ctx || blk;
}

struct Grads {
  std::vector<double> out, dq, dk, dv;
};

Grads naive(const Data& d, double scale) {
  const Case& c = d.c;
  const int64_t G = c.Hq / c.Hkv, Tq = d.Tq(), Tk = d.Tk(), D = c.D;
  Grads g;
  g.out.assign(d.q.size(), 0);
  g.dq.assign(d.q.size(), 0);
  g.dk.assign(d.k.size(), 0);
  g.dv.assign(d.v.size(), 0);
  const auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * Tq + t) * c.Hq + h) * D; };
  const auto ki = [&](int64_t b, int64_t t, int64_t h) { return ((b * Tk + t) * c.Hkv + h) * D; };
  std::vector<double> p(Tk), dp(Tk);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t r = 0; r < Tq; ++r) {
        const int64_t kh = h / G;
        double mx = -INFINITY;
        for (int64_t t = 0; t < Tk; ++t) {
          p[t] = -INFINITY;
          if (!visible(d, b, r, t)) continue;
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += d.q[qi(b, r, h) + e] * d.k[ki(b, t, kh) + e];
          p[t] = s * scale;
          mx = std::max(mx, p[t]);
        }
        if (mx == -INFINITY) continue;  // sees nothing: zero output and gradients
        double sum = 0;
        for (int64_t t = 0; t < Tk; ++t) sum += p[t] = (p[t] == -INFINITY ? 0 : std::exp(p[t] - mx));
        double dsum = 0;
        for (int64_t t = 0; t < Tk; ++t) {
          p[t] /= sum;
          double x = 0;
          for (int64_t e = 0; e < D; ++e) {
            g.out[qi(b, r, h) + e] += p[t] * d.v[ki(b, t, kh) + e];
            x += d.dout[qi(b, r, h) + e] * d.v[ki(b, t, kh) + e];
          }
          dp[t] = x;
          dsum += p[t] * x;
        }
        for (int64_t t = 0; t < Tk; ++t) {
          if (p[t] == 0) continue;
          const double ds = p[t] * (dp[t] - dsum) * scale;
          for (int64_t e = 0; e < D; ++e) {
            g.dq[qi(b, r, h) + e] += ds * d.k[ki(b, t, kh) + e];
            g.dk[ki(b, t, kh) + e] += ds * d.q[qi(b, r, h) + e];
            g.dv[ki(b, t, kh) + e] += p[t] * d.dout[qi(b, r, h) + e];
          }
        }
      }
  return g;
}

// Runs the kernel in fp64 through its public API with `partitions` dQ partitions, items in order.
Grads fused(const Data& d, double scale, int64_t partitions) {
  const Case& c = d.c;
  AnchorAttentionArgs a;
  a.shape = {c.batch, c.N, c.B, c.S, c.Hq, c.Hkv, c.D, c.window, scale, dflash::kernels::ScalarType::Float64};
  const int64_t Tq = d.Tq(), Tk = d.Tk();
  a.q = {d.q.data(), Tq * c.Hq * c.D, c.Hq * c.D, c.D};
  a.k = {d.k.data(), Tk * c.Hkv * c.D, c.Hkv * c.D, c.D};
  a.v = {d.v.data(), Tk * c.Hkv * c.D, c.Hkv * c.D, c.D};
  a.dout = {d.dout.data(), Tq * c.Hq * c.D, c.Hq * c.D, c.D};
  a.anchors = d.anchors.data();
  a.anchors_sb = c.N;
  a.keep = reinterpret_cast<const bool*>(d.keep.data());
  a.keep_sb = c.N;
  if (!d.ctx_start.empty()) {
    a.ctx_start = d.ctx_start.data();
    a.ctx_start_sb = c.N;
  }
  Grads g;
  g.out.assign(d.q.size(), 0);
  g.dq.assign(d.q.size(), 0);
  g.dk.assign(d.k.size(), 0);
  g.dv.assign(d.v.size(), 0);
  std::vector<double> lse(c.batch * c.Hq * Tq, -INFINITY);
  a.out = {g.out.data(), Tq * c.Hq * c.D, c.Hq * c.D, c.D};
  a.lse = lse.data();
  a.dq = {g.dq.data(), Tq * c.Hq * c.D, c.Hq * c.D, c.D};
  a.dk = {g.dk.data(), Tk * c.Hkv * c.D, c.Hkv * c.D, c.D};
  a.dv = {g.dv.data(), Tk * c.Hkv * c.D, c.Hkv * c.D, c.D};
  EXPECT_EQ(dflash::kernels::check_anchor_values(a), "");
  const auto plan = dflash::kernels::plan_anchor_attention(a, partitions);
  dflash::kernels::anchor_attention_forward(a, plan, 0, 1);
  std::vector<double> delta(dflash::kernels::anchor_attention_delta_numel(a.shape));
  dflash::kernels::anchor_attention_delta(a, delta.data(), 0, int64_t(delta.size()));
  const int64_t part = dflash::kernels::anchor_attention_dq_partition_numel(a.shape);
  std::vector<double> parts(plan.dq_partitions * part, 0.0);
  for (int64_t p = 0; p < plan.dq_partitions; ++p)
    dflash::kernels::anchor_attention_backward_partition(a, plan, delta.data(), p, parts.data() + p * part);
  dflash::kernels::anchor_attention_reduce_dq(a, plan, parts.data(), 0, c.batch * Tq * c.Hq);
  return g;
}

double max_rel(const std::vector<double>& x, const std::vector<double>& ref) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

class KernelVsNaive : public ::testing::TestWithParam<std::tuple<Case, dflash::kernels::CpuIsa>> {};

TEST_P(KernelVsNaive, ForwardAndGradientsMatchFp64) {
  const Case c = std::get<0>(GetParam());
  DFLASH_USE_ISA(std::get<1>(GetParam()));
  const Data d = make_data(c, 1234);
  const double scale = 1.0 / std::sqrt(double(c.D));
  const Grads ref = naive(d, scale);
  for (int64_t partitions : {1, 3, 8}) {
    const Grads got = fused(d, scale, partitions);
    EXPECT_LE(max_rel(got.out, ref.out), 1e-12) << "out, partitions " << partitions;
    EXPECT_LE(max_rel(got.dq, ref.dq), 1e-12) << "dq, partitions " << partitions;
    EXPECT_LE(max_rel(got.dk, ref.dk), 1e-12) << "dk, partitions " << partitions;
    EXPECT_LE(max_rel(got.dv, ref.dv), 1e-12) << "dv, partitions " << partitions;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelVsNaive,
                         ::testing::Combine(::testing::Values(Case{1, 20, 3, 4, 2, 1, 8, 0}, Case{2, 70, 5, 16, 4, 2, 64, 0},
                                                              Case{1, 150, 4, 16, 8, 8, 32, 0},
                                                              Case{1, 3, 4, 16, 2, 2, 16, 0},
                                                              Case{2, 90, 6, 8, 8, 1, 24, 20},
                                                              Case{1, 200, 3, 16, 4, 4, 64, 70},
                                                              Case{1, 130, 2, 100, 2, 1, 8, 0},
                                                              Case{2, 300, 12, 16, 4, 2, 32, 0, Ctx::Packed},
                                                              Case{1, 260, 9, 8, 8, 1, 16, 40, Ctx::Packed},
                                                              Case{2, 90, 7, 4, 2, 1, 8, 0, Ctx::Arbitrary},
                                                              Case{1, 150, 6, 16, 4, 4, 24, 30, Ctx::Arbitrary},
                                                              // head_dim > 64: 64-key tiles (cpu_key_tile)
                                                              Case{1, 150, 3, 16, 4, 2, 136, 0}),
                                            dflash::kernels::testing::kEveryIsa));

TEST(KernelChecks, AnchorOutsideContextIsNamed) {
  std::vector<int64_t> anchors{0, 5, 11};
  std::vector<uint8_t> keep{1, 1, 1};
  AnchorAttentionArgs a;
  a.shape.batch = 1;
  a.shape.num_blocks = 3;
  a.shape.context_len = 10;
  a.anchors = anchors.data();
  a.anchors_sb = 3;
  a.keep = reinterpret_cast<const bool*>(keep.data());
  EXPECT_EQ(dflash::kernels::check_anchor_values(a),
            "anchors[0, 2] = 11 is outside [0, S] with context length S = 10");
  anchors[2] = 10;
  std::vector<int64_t> starts{0, -1, 3};
  a.ctx_start = starts.data();
  a.ctx_start_sb = 3;
  EXPECT_EQ(dflash::kernels::check_anchor_values(a),
            "ctx_start[0, 1] = -1 is outside [0, S] with context length S = 10");
}

// A packed row's plan: forward items never mix documents, and no backward item covers a context tile that
// no kept block sees (here: the tail of the row after the last document's anchors).
TEST(KernelPlan, PackedRowsSplitItemsByDocument) {
  const int64_t N = 4;
  AnchorAttentionArgs a;
  a.shape = {1, N, 16, 400, 2, 2, 8, 0, 1.0, dflash::kernels::ScalarType::Float32};
  const int64_t T = dflash::kernels::cpu_key_tile(a.shape);  // S = 400 leaves tiles past 2T unseen
  std::vector<int64_t> anchors{10, 20, T + 36, T + 46}, starts{0, 0, T + 32, T + 32};
  std::vector<uint8_t> keep{1, 1, 1, 1};
  a.anchors = anchors.data();
  a.anchors_sb = N;
  a.keep = reinterpret_cast<const bool*>(keep.data());
  a.keep_sb = N;
  a.ctx_start = starts.data();
  a.ctx_start_sb = N;
  const auto p = dflash::kernels::plan_anchor_attention(a);
  for (const auto& it : p.fwd)
    for (int64_t i = 1; i < it.count; ++i)
      EXPECT_EQ(starts[size_t(p.order[size_t(it.first)])], starts[size_t(p.order[size_t(it.first + i)])]);
  std::vector<int64_t> tiles;
  for (const auto& it : p.bwd)
    if (it.block < 0 && it.kv_head == 0) tiles.push_back(it.key0);
  EXPECT_EQ(tiles, (std::vector<int64_t>{0, T}));  // keys [0, 20) and [T + 32, T + 46): tiles 0 and T only
}

}  // namespace
