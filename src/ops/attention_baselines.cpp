#include "attention_baselines.h"

#include <limits>

#include <ATen/ATen.h>

namespace dflash::bench {
namespace {

// docs/DFLASH.md mask for query rows `rows` (block qb = row / B, slot j = row % B) over key columns `cols`.
at::Tensor spec_mask(const at::Tensor& anchors2d, const at::Tensor& keep2d, const at::Tensor& rows,
                     const at::Tensor& cols, int64_t S, int64_t B, int64_t window) {
  const auto qb = at::floor_divide(rows, B);
  const auto j = at::remainder(rows, B).unsqueeze(-1);
  const auto a = anchors2d.index_select(1, qb).unsqueeze(-1);  // [batch, rows, 1]
  auto ctx = (cols < S) & (cols < a);
  auto blk = (cols >= S) & (at::floor_divide(cols - S, B) == qb.unsqueeze(-1));
  if (window > 0) {
    ctx = ctx & (cols >= a + j - (window - 1));
    blk = blk & (at::remainder(cols - S, B) <= j);
  }
  return (ctx | blk) & keep2d.index_select(1, qb).unsqueeze(-1);
}

at::Tensor as_2d(const at::Tensor& t, int64_t batch) { return t.dim() == 1 ? t.unsqueeze(0).expand({batch, -1}) : t; }

}  // namespace

at::Tensor dense_masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                  int64_t window, double scale) {
  const int64_t batch = q.size(0), Tq = q.size(1), Hq = q.size(2), Tk = k.size(1), S = Tk - Tq;
  const int64_t G = Hq / k.size(2);
  const auto idx = at::TensorOptions().dtype(at::kLong).device(q.device());
  const auto mask = spec_mask(as_2d(anchors, batch), as_2d(keep, batch), at::arange(Tq, idx), at::arange(Tk, idx), S,
                              block_size, window)
                        .unsqueeze(1);  // [batch, 1, Tq, Tk]
  const auto kx = k.repeat_interleave(G, 2).transpose(1, 2);
  const auto vx = v.repeat_interleave(G, 2).transpose(1, 2);
  auto s = at::matmul(q.transpose(1, 2), kx.transpose(-1, -2)) * scale;
  s = s.masked_fill(~mask, -std::numeric_limits<double>::infinity());
  const auto any = mask.any(-1, true);
  s = at::where(any, s, at::zeros_like(s));  // rows that see nothing output zero, not NaN
  const auto p = at::softmax(s, -1) * any;
  return at::matmul(p, vx).transpose(1, 2);
}

at::Tensor per_block_sdpa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                    int64_t window, double scale, int64_t chunk_blocks) {
  const int64_t batch = q.size(0), Tq = q.size(1), Hq = q.size(2), D = q.size(3), Hkv = k.size(2);
  const int64_t B = block_size, N = Tq / B, S = k.size(1) - Tq, G = Hq / Hkv, L = S + B;
  const auto idx = at::TensorOptions().dtype(at::kLong).device(q.device());
  const auto a2 = as_2d(anchors, batch), k2 = as_2d(keep, batch);
  std::vector<at::Tensor> outs;
  for (int64_t n0 = 0; n0 < N; n0 += chunk_blocks) {
    const int64_t nb = std::min(chunk_blocks, N - n0);
    // Gathered key positions per block: the whole context, then the block's own B keys.
    const auto blocks = at::arange(n0, n0 + nb, idx);
    const auto own = S + blocks.unsqueeze(1) * B + at::arange(B, idx).unsqueeze(0);          // [nb, B]
    const auto pos = at::cat({at::arange(S, idx).unsqueeze(0).expand({nb, S}), own}, 1);    // [nb, L]
    const auto gather = [&](const at::Tensor& x) {
      return x.index_select(1, pos.flatten())
          .view({batch, nb, L, Hkv, D})
          .repeat_interleave(G, 3)  // GQA heads expanded, as SDPA with a boolean mask needs
          .permute({0, 1, 3, 2, 4})
          .reshape({batch * nb, Hq, L, D});
    };
    const auto kg = gather(k), vg = gather(v);
    const auto qc = q.narrow(1, n0 * B, nb * B).view({batch, nb, B, Hq, D}).permute({0, 1, 3, 2, 4}).reshape(
        {batch * nb, Hq, B, D});
    // Mask in gathered coordinates: column c < S is context key c, column S + i is own slot i.
    const auto rows = at::arange(n0 * B, (n0 + nb) * B, idx);
    auto key_ids = pos.repeat_interleave(B, 0);  // [nb*B, L] original key index of each column
    const auto qb = at::floor_divide(rows, B), j = at::remainder(rows, B).unsqueeze(-1);
    const auto a = a2.index_select(1, qb).unsqueeze(-1);
    auto ctx = (key_ids < S) & (key_ids < a);
    auto blk = key_ids >= S;
    if (window > 0) {
      ctx = ctx & (key_ids >= a + j - (window - 1));
      blk = blk & (at::remainder(key_ids - S, B) <= j);
    }
    auto mask = (ctx | blk).view({batch, nb, 1, B, L}).reshape({batch * nb, 1, B, L});
    auto o = at::scaled_dot_product_attention(qc, kg, vg, mask, 0.0, false, scale);
    // Invalid blocks: zero output (their rows still see their own keys, so SDPA gave finite values).
    const auto keep_c = k2.narrow(1, n0, nb).reshape({batch * nb, 1, 1, 1}).to(o.scalar_type());
    o = o * keep_c;
    outs.push_back(o.view({batch, nb, Hq, B, D}).permute({0, 1, 3, 2, 4}).reshape({batch, nb * B, Hq, D}));
  }
  return at::cat(outs, 1);
}

double dense_predicted_bytes(int64_t batch, int64_t Tq, int64_t Tk, int64_t Hq, int64_t elem_bytes) {
  // scores, masked scores, where() output, softmax, probabilities x any: five [batch,Hq,Tq,Tk] tensors.
  return 5.0 * double(batch) * double(Hq) * double(Tq) * double(Tk) * double(elem_bytes);
}

double per_block_sdpa_predicted_bytes(int64_t batch, int64_t N, int64_t B, int64_t S, int64_t Hq, int64_t D,
                                      int64_t elem_bytes) {
  // Gathered + expanded K and V of every chunk stay alive under autograd, plus SDPA's probabilities.
  const double L = double(S + B);
  return double(batch) * double(N) * double(Hq) * L * (2.0 * double(D) + 2.0 * double(B)) * double(elem_bytes);
}

}  // namespace dflash::bench
