#include "sink_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dflash::models {
namespace {

constexpr int64_t kScoreBudget = int64_t(1) << 24;  // scores held per chunk (elements)

// [B, Hkv, S, D] -> [B, Hkv * groups, S, D], each kv head serving `groups` consecutive query heads.
at::Tensor repeat_kv(const at::Tensor& t, int64_t groups) {
  if (groups == 1) return t;
  const int64_t B = t.size(0), H = t.size(1), S = t.size(2), D = t.size(3);
  return t.unsqueeze(2).expand({B, H, groups, S, D}).reshape({B, H * groups, S, D});
}

}  // namespace

at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& sinks,
                          int64_t past, int64_t window) {
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t groups = Hq / k_in.size(1);
  const at::Tensor k = repeat_kv(k_in, groups), v = repeat_kv(v_in, groups);
  const double scale = 1.0 / std::sqrt(double(D));
  const int64_t S = past + T;
  const int64_t chunk = std::clamp<int64_t>(kScoreBudget / std::max<int64_t>(1, B * Hq * S), 1, T);
  const at::Tensor sink = sinks.reshape({1, Hq, 1, 1});
  auto lopts = at::TensorOptions().dtype(at::kLong).device(q.device());
  std::vector<at::Tensor> outs;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    // the keys any query of the chunk sees: [lo, hi)
    const int64_t hi = past + t0 + n, lo = window > 0 ? std::max<int64_t>(0, past + t0 - window + 1) : 0;
    const at::Tensor kc = k.narrow(2, lo, hi - lo), vc = v.narrow(2, lo, hi - lo);
    at::Tensor scores = at::matmul(q.narrow(2, t0, n), kc.transpose(2, 3)) * scale;  // [B, Hq, n, hi - lo]
    const at::Tensor qpos = (at::arange(n, lopts) + (past + t0)).unsqueeze(1), kpos = (at::arange(hi - lo, lopts) + lo).unsqueeze(0);
    at::Tensor hidden = kpos > qpos;
    if (window > 0) hidden = hidden.logical_or(kpos <= qpos - window);
    scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    at::Tensor combined = at::cat({scores, sink.expand({B, Hq, n, 1}).to(scores.scalar_type())}, -1);
    combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
    const at::Tensor probs = at::softmax(combined, -1).narrow(-1, 0, hi - lo).to(v.scalar_type());
    outs.push_back(at::matmul(probs, vc));
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs, 2);
}

at::Tensor sink_decode_attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<KVCache*>& caches, const at::Tensor& sinks, int64_t window) {
  const int64_t B = q.size(0);
  std::vector<at::Tensor> attn(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t past = caches[size_t(b)]->length();
    auto [k_all, v_all] = caches[size_t(b)]->store(layer, k.narrow(0, b, 1), v.narrow(0, b, 1));
    attn[size_t(b)] = sink_attention(q.narrow(0, b, 1), k_all, v_all, sinks, past, window);
  }
  return B == 1 ? attn[0] : at::cat(attn, 0);
}

}  // namespace dflash::models
