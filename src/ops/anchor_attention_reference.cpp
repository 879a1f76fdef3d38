// The reference anchor-block attention (anchor_attention_reference.h): tiles of anchor-sorted blocks, LibTorch
// ops only, its own autograd function that recomputes each tile in backward.
#include "anchor_attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "anchor_attention.h"
#include "anchor_attention_checks.h"
#include "anchor_mask.h"

namespace dflash::ops {
namespace {

double resolve_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? checked_attention_scale(*scale) : 1.0 / std::sqrt(double(q.size(-1)));
}

at::ScalarType acc_type(const at::Tensor& q, bool in_input_dtype) {
  if (in_input_dtype) return q.scalar_type();
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// anchors, keep and ctx_start on the host, read as [batch, N] (a [N] tensor serves every batch row).
struct HostIndex {
  at::Tensor anchors, keep, ctx_start;
  int64_t anchor(int64_t b, int64_t n) const { return at_row(anchors, b)[n]; }
  bool kept(int64_t b, int64_t n) const { return keep.dim() == 2 ? keep.data_ptr<bool>()[b * keep.stride(0) + n] : keep.data_ptr<bool>()[n]; }
  int64_t start(int64_t b, int64_t n) const { return ctx_start.defined() ? at_row(ctx_start, b)[n] : 0; }

 private:
  static const int64_t* at_row(const at::Tensor& t, int64_t b) {
    return t.data_ptr<int64_t>() + (t.dim() == 2 ? b * t.stride(0) : 0);
  }
};

HostIndex host_index(const at::Tensor& anchors, const at::Tensor& keep, const at::Tensor& ctx_start) {
  const auto host = [](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU).contiguous() : t; };
  return {host(anchors), host(keep), host(ctx_start)};
}

// anchors and ctx_start in [0, S], with the fused op's message.
void check_values(const AttentionDims& d, const HostIndex& h) {
  kernels::AnchorAttentionArgs a;
  a.shape.batch = d.batch;
  a.shape.num_blocks = d.num_blocks;
  a.shape.context_len = d.context_len;
  a.anchors = h.anchors.data_ptr<int64_t>();
  a.anchors_sb = h.anchors.dim() == 2 ? h.anchors.stride(0) : 0;
  if (h.ctx_start.defined()) {
    a.ctx_start = h.ctx_start.data_ptr<int64_t>();
    a.ctx_start_sb = h.ctx_start.dim() == 2 ? h.ctx_start.stride(0) : 0;
  }
  const std::string bad = kernels::check_anchor_values(a);
  TORCH_CHECK(bad.empty(), "anchor_block_attention: ", bad);
}

// Kept blocks of one batch row that share a tile, sorted by anchor, and the context keys [lo, hi) they need.
struct Tile {
  int64_t lo = 0, hi = 0;  // hi <= lo: no block of the tile sees a context key
  std::vector<int64_t> blocks;
};

std::vector<Tile> plan_tiles(const AttentionDims& d, const HostIndex& h, int64_t b, int64_t window, int64_t acc_bytes,
                             int64_t budget) {
  std::vector<int64_t> order;
  for (int64_t n = 0; n < d.num_blocks; ++n)
    if (h.kept(b, n)) order.push_back(n);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return h.anchor(b, x) < h.anchor(b, y); });
  std::vector<Tile> tiles;
  Tile cur;
  for (const int64_t n : order) {
    // Slot 0 has the lowest context start of its block; every slot's context ends at the anchor.
    const kernels::RowRanges r = kernels::row_ranges(h.anchor(b, n), 0, d.block_size, window, h.start(b, n));
    Tile next = cur;
    next.blocks.push_back(n);
    if (r.ctx_lo < r.ctx_hi) {
      const bool empty = next.hi <= next.lo;
      next.lo = empty ? r.ctx_lo : std::min(next.lo, r.ctx_lo);
      next.hi = empty ? r.ctx_hi : std::max(next.hi, r.ctx_hi);
    }
    const int64_t rows = int64_t(next.blocks.size()) * d.block_size;
    const int64_t bytes = reference_tile_bytes(rows, std::max<int64_t>(0, next.hi - next.lo), d.q_heads, d.kv_heads,
                                               d.head_dim, d.block_size, acc_bytes);
    if (!cur.blocks.empty() && bytes > budget) {
      tiles.push_back(cur);
      cur = Tile{};
      cur.blocks.push_back(n);
      if (r.ctx_lo < r.ctx_hi) cur.lo = r.ctx_lo, cur.hi = r.ctx_hi;
    } else {
      cur = next;
    }
  }
  if (!cur.blocks.empty()) tiles.push_back(cur);
  return tiles;
}

// One tile's inputs and masked scores. Query heads are [Hkv, G]: head h = kv * G + g reads KV head kv.
struct TileScores {
  at::Tensor idx;    // [rows] query rows of the tile (block n, slot j -> n * B + j)
  at::Tensor qs;     // [Hkv, G, rows, D] q * scale
  at::Tensor kc, vc; // [Hkv, Lc, D] context keys [lo, hi) (undefined when the tile sees none)
  at::Tensor ko, vo; // [Hkv, 1, nb, B, D] each block's own keys
  at::Tensor s_ctx;  // [Hkv, G, rows, Lc] scores, -inf where the row does not see the key
  at::Tensor s_own;  // [Hkv, G, nb, B, B]
};

// [T, H, D] rows `idx` -> [Hkv, G, rows, D] in `acc` (a fresh tensor).
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& idx, int64_t kv_heads, at::ScalarType acc) {
  const int64_t rows = idx.size(0), H = x.size(1), D = x.size(2);
  return x.index_select(0, idx).to(acc).view({rows, kv_heads, H / kv_heads, D}).permute({1, 2, 0, 3}).contiguous();
}

TileScores tile_scores(const at::Tensor& qb, const at::Tensor& kb, const at::Tensor& vb, const Tile& t,
                       const AttentionDims& d, const HostIndex& h, int64_t b, int64_t window, double scale,
                       at::ScalarType acc) {
  const int64_t B = d.block_size, nb = int64_t(t.blocks.size()), rows = nb * B, Hkv = d.kv_heads, D = d.head_dim;
  const int64_t G = d.q_heads / Hkv, Lc = std::max<int64_t>(0, t.hi - t.lo);
  std::vector<int64_t> idx, row_lo, row_hi;
  for (const int64_t n : t.blocks)
    for (int64_t j = 0; j < B; ++j) {
      const kernels::RowRanges r = kernels::row_ranges(h.anchor(b, n), j, B, window, h.start(b, n));
      idx.push_back(n * B + j);
      row_lo.push_back(r.ctx_lo);
      row_hi.push_back(r.ctx_hi);
    }
  const auto dev = qb.device();
  const auto longs = at::TensorOptions().dtype(at::kLong);
  TileScores s;
  s.idx = at::tensor(idx, longs).to(dev);
  s.qs = gather_rows(qb, s.idx, Hkv, acc).mul_(scale);
  const at::Tensor own = s.idx + d.context_len;
  const auto own_keys = [&](const at::Tensor& x) {  // [rows, Hkv, D] -> [Hkv, 1, nb, B, D]
    return x.index_select(0, own).to(acc).view({nb, B, Hkv, D}).permute({2, 0, 1, 3}).unsqueeze(1);
  };
  s.ko = own_keys(kb);
  s.vo = own_keys(vb);
  s.s_own = at::matmul(s.qs.view({Hkv, G, nb, B, D}), s.ko.transpose(-1, -2));
  if (window > 0) {  // in sliding-window layers slot j sees its block's slots <= j
    const auto slots = at::arange(B, longs.device(dev));
    s.s_own.masked_fill_(slots.view({1, B}) > slots.view({B, 1}), -std::numeric_limits<double>::infinity());
  }
  if (Lc > 0) {
    s.kc = kb.narrow(0, t.lo, Lc).to(acc).permute({1, 0, 2});
    s.vc = vb.narrow(0, t.lo, Lc).to(acc).permute({1, 0, 2});
    s.s_ctx = at::matmul(s.qs.view({Hkv, G * rows, D}), s.kc.transpose(1, 2)).view({Hkv, G, rows, Lc});
    const at::Tensor keys = at::arange(t.lo, t.hi, longs.device(dev)).view({1, Lc});
    const at::Tensor lo = at::tensor(row_lo, longs).to(dev).view({rows, 1});
    const at::Tensor hi = at::tensor(row_hi, longs).to(dev).view({rows, 1});
    s.s_ctx.masked_fill_((keys < lo) | (keys >= hi), -std::numeric_limits<double>::infinity());
  }
  return s;
}

// [Hkv, G, rows, D] -> [rows, Hq, D]
at::Tensor heads_last(const at::Tensor& x) {
  return x.permute({2, 0, 1, 3}).reshape({x.size(2), x.size(0) * x.size(1), x.size(3)});
}

struct RefArgs {
  AttentionDims d;
  HostIndex h;
  int64_t window = 0, budget = 0;
  double scale = 1;
  at::ScalarType acc = at::kFloat;
};

RefArgs ref_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& anchors,
                 const at::Tensor& keep, int64_t block_size, int64_t window, double scale, const at::Tensor& ctx_start,
                 int64_t tile_bytes, bool in_input_dtype) {
  RefArgs r;
  r.d = check_attention_args(q, k, v, anchors, keep, block_size, window, ctx_start);
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), "anchor_block_attention_reference: q, k, v must be floating point, got ",
              q.scalar_type());
  r.h = host_index(anchors, keep, ctx_start);
  check_values(r.d, r.h);
  r.window = window;
  r.scale = scale;
  r.budget = tile_bytes > 0 ? tile_bytes : kDefaultReferenceTileBytes;
  r.acc = acc_type(q, in_input_dtype);
  return r;
}

int64_t bytes_of(at::ScalarType t) { return int64_t(c10::elementSize(t)); }

}  // namespace

int64_t reference_tile_bytes(int64_t rows, int64_t ctx_keys, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                             int64_t block_size, int64_t acc_bytes) {
  return acc_bytes * (2 * q_heads * rows * ctx_keys + 4 * ctx_keys * kv_heads * head_dim +
                      2 * q_heads * rows * block_size + 6 * q_heads * rows * head_dim) +
         rows * ctx_keys;
}

int64_t reference_blocks_per_tile(int64_t ctx_keys, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                  int64_t block_size, int64_t acc_bytes, int64_t tile_bytes) {
  const int64_t budget = tile_bytes > 0 ? tile_bytes : kDefaultReferenceTileBytes;
  // The tile's bytes grow linearly with its blocks: fixed (the context K/V slices) + per block.
  const int64_t fixed = reference_tile_bytes(0, ctx_keys, q_heads, kv_heads, head_dim, block_size, acc_bytes);
  const int64_t per_block =
      reference_tile_bytes(block_size, ctx_keys, q_heads, kv_heads, head_dim, block_size, acc_bytes) - fixed;
  return std::max<int64_t>(1, (budget - fixed) / std::max<int64_t>(1, per_block));
}

std::tuple<at::Tensor, at::Tensor> anchor_attention_reference_fwd(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& anchors,
                                                                  const at::Tensor& keep, int64_t block_size,
                                                                  int64_t window, double scale,
                                                                  const at::Tensor& ctx_start, int64_t tile_bytes,
                                                                  bool in_input_dtype) {
  at::NoGradGuard no_grad;
  const RefArgs r = ref_args(q, k, v, anchors, keep, block_size, window, scale, ctx_start, tile_bytes, in_input_dtype);
  const AttentionDims& d = r.d;
  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = at::full({d.batch, d.q_heads, d.num_blocks * d.block_size}, -std::numeric_limits<double>::infinity(),
                            q.options().dtype(r.acc));
  const int64_t Hkv = d.kv_heads, G = d.q_heads / Hkv, B = d.block_size, D = d.head_dim;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (const Tile& t : plan_tiles(d, r.h, b, window, bytes_of(r.acc), r.budget)) {
      TileScores s = tile_scores(q[b], k[b], v[b], t, d, r.h, b, window, scale, r.acc);
      const int64_t nb = int64_t(t.blocks.size()), rows = nb * B;
      // Softmax over both key ranges with one running max: every kept row sees at least its own slot 0.
      at::Tensor m = s.s_own.amax(-1).view({Hkv, G, rows});
      if (s.s_ctx.defined()) m = at::maximum(m, s.s_ctx.amax(-1));
      const at::Tensor e_own = s.s_own.sub_(m.view({Hkv, G, nb, B, 1})).exp_();
      at::Tensor l = e_own.sum(-1).view({Hkv, G, rows});
      at::Tensor o = at::matmul(e_own, s.vo).view({Hkv, G, rows, D});
      if (s.s_ctx.defined()) {
        const at::Tensor e_ctx = s.s_ctx.sub_(m.unsqueeze(-1)).exp_();
        l.add_(e_ctx.sum(-1));
        o.add_(at::matmul(e_ctx.view({Hkv, G * rows, -1}), s.vc).view({Hkv, G, rows, D}));
      }
      o.div_(l.unsqueeze(-1));
      out[b].index_copy_(0, s.idx, heads_last(o).to(q.scalar_type()));
      lse[b].index_copy_(1, s.idx, (m + l.log()).view({d.q_heads, rows}));
    }
  }
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_attention_reference_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
    double scale, const at::Tensor& ctx_start, int64_t tile_bytes, bool in_input_dtype) {
  at::NoGradGuard no_grad;
  const RefArgs r = ref_args(q, k, v, anchors, keep, block_size, window, scale, ctx_start, tile_bytes, in_input_dtype);
  const AttentionDims& d = r.d;
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(),
              "anchor_block_attention_reference backward: dout and out must have the shape of q ", q.sizes());
  check_saved_lse(lse, d, r.acc);
  at::Tensor dq = at::zeros(q.sizes(), q.options());
  // dK/dV accumulate over tiles in the accumulation dtype (keys nobody sees keep a zero gradient).
  at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(r.acc));
  at::Tensor dv = at::zeros(v.sizes(), v.options().dtype(r.acc));
  const int64_t Hkv = d.kv_heads, G = d.q_heads / Hkv, B = d.block_size, D = d.head_dim;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (const Tile& t : plan_tiles(d, r.h, b, window, bytes_of(r.acc), r.budget)) {
      TileScores s = tile_scores(q[b], k[b], v[b], t, d, r.h, b, window, scale, r.acc);
      const int64_t nb = int64_t(t.blocks.size()), rows = nb * B;
      const at::Tensor row_lse = lse[b].index_select(1, s.idx).view({Hkv, G, rows});
      const at::Tensor p_own = s.s_own.sub_(row_lse.view({Hkv, G, nb, B, 1})).exp_();
      const at::Tensor dout_t = gather_rows(dout[b], s.idx, Hkv, r.acc);
      const at::Tensor delta = (dout_t * gather_rows(out[b], s.idx, Hkv, r.acc)).sum(-1);  // rowsum(dO * O)
      const at::Tensor do5 = dout_t.view({Hkv, G, nb, B, D}), qs5 = s.qs.view({Hkv, G, nb, B, D});
      const at::Tensor ds_own =
          at::matmul(do5, s.vo.transpose(-1, -2)).sub_(delta.view({Hkv, G, nb, B, 1})).mul_(p_own);
      at::Tensor dq_t = at::matmul(ds_own, s.ko).view({Hkv, G, rows, D});
      // Own keys: summed over the G query heads of each KV head; each block's own keys are its alone.
      const auto own_rows = [&](const at::Tensor& x) { return x.sum(1).permute({1, 2, 0, 3}).reshape({rows, Hkv, D}); };
      const at::Tensor own = s.idx + d.context_len;
      dv[b].index_add_(0, own, own_rows(at::matmul(p_own.transpose(-1, -2), do5)));
      dk[b].index_add_(0, own, own_rows(at::matmul(ds_own.transpose(-1, -2), qs5)));
      if (s.s_ctx.defined()) {
        const int64_t Lc = t.hi - t.lo;
        const at::Tensor p_ctx = s.s_ctx.sub_(row_lse.unsqueeze(-1)).exp_().view({Hkv, G * rows, Lc});
        const at::Tensor do3 = dout_t.view({Hkv, G * rows, D});
        const at::Tensor ds_ctx = at::matmul(do3, s.vc.transpose(1, 2))
                                      .view({Hkv, G, rows, Lc})
                                      .sub_(delta.unsqueeze(-1))
                                      .mul_(p_ctx.view({Hkv, G, rows, Lc}))
                                      .view({Hkv, G * rows, Lc});
        dv[b].narrow(0, t.lo, Lc).add_(at::matmul(p_ctx.transpose(1, 2), do3).permute({1, 0, 2}));
        dk[b].narrow(0, t.lo, Lc).add_(at::matmul(ds_ctx.transpose(1, 2), s.qs.view({Hkv, G * rows, D})).permute({1, 0, 2}));
        dq_t.add_(at::matmul(ds_ctx, s.kc).view({Hkv, G, rows, D}));
      }
      dq[b].index_copy_(0, s.idx, heads_last(dq_t.mul_(scale)).to(q.scalar_type()));
    }
  }
  return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

namespace {

// Saves q, k, v, out and the row LSE (never scores); backward recomputes each tile.
class ReferenceAttentionFunction : public torch::autograd::Function<ReferenceAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                            int64_t window, double scale, const std::optional<at::Tensor>& ctx_start,
                            int64_t tile_bytes) {
    const at::Tensor cs = ctx_start_or_undefined(ctx_start);
    auto [out, lse] = anchor_attention_reference_fwd(q, k, v, anchors, keep, block_size, window, scale, cs, tile_bytes);
    std::vector<at::Tensor> saved = {q, k, v, out, lse, anchors, keep};
    if (cs.defined()) saved.push_back(cs);  // an undefined tensor cannot be saved
    ctx->save_for_backward(saved);
    ctx->saved_data["block_size"] = block_size;
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["tile_bytes"] = tile_bytes;
    ctx->mark_non_differentiable({lse});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [dq, dk, dv] = anchor_attention_reference_bwd(
        grads[0], s[0], s[1], s[2], s[3], s[4], s[5], s[6], ctx->saved_data["block_size"].toInt(),
        ctx->saved_data["window"].toInt(), ctx->saved_data["scale"].toDouble(), s.size() > 7 ? s[7] : at::Tensor(),
        ctx->saved_data["tile_bytes"].toInt());
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor reference_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& anchors,
                              const at::Tensor& keep, int64_t block_size, int64_t window, std::optional<double> scale,
                              const std::optional<at::Tensor>& ctx_start, int64_t tile_bytes) {
  check_attention_devices("anchor_block_attention_reference", q, k, v, anchors, keep, ctx_start_or_undefined(ctx_start));
  return ReferenceAttentionFunction::apply(q, k, v, anchors, keep, block_size, window, resolve_scale(q, scale),
                                           ctx_start, tile_bytes);
}

at::Tensor reference_inference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& anchors,
                               const at::Tensor& keep, int64_t block_size, int64_t window, std::optional<double> scale,
                               const std::optional<at::Tensor>& ctx_start, int64_t tile_bytes) {
  check_attention_devices("anchor_block_attention_reference", q, k, v, anchors, keep, ctx_start_or_undefined(ctx_start));
  return std::get<0>(anchor_attention_reference_fwd(q, k, v, anchors, keep, block_size, window, resolve_scale(q, scale),
                                                    ctx_start_or_undefined(ctx_start), tile_bytes));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(dflash, m) {
  m.def("anchor_block_attention_reference(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor keep, int block_size, "
        "int window=0, float? scale=None, Tensor? ctx_start=None, int tile_bytes=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(dflash, Autograd, m) { m.impl("anchor_block_attention_reference", &reference_autograd); }
TORCH_LIBRARY_IMPL(dflash, CompositeExplicitAutograd, m) {
  m.impl("anchor_block_attention_reference", &reference_inference);
}

at::Tensor anchor_block_attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                            int64_t window, std::optional<double> scale, const at::Tensor& ctx_start,
                                            int64_t tile_bytes) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dflash::anchor_block_attention_reference", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                               std::optional<double>, const std::optional<at::Tensor>&, int64_t)>();
  return op.call(q, k, v, anchors, keep, block_size, window, scale,
                 ctx_start.defined() ? std::optional<at::Tensor>(ctx_start) : std::nullopt, tile_bytes);
}

}  // namespace dflash::ops
