#include "drafter_model.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "decoder_layer.h"
#include "family_model.h"
#include "norm_ops.h"

namespace dflash::drafter {

RopePositions rope_positions(const at::Tensor& anchors, int64_t S, int64_t block_size, const at::Tensor& doc_start,
                             const at::Tensor& ctx_start) {
  const int64_t b = anchors.size(0);
  const auto long_opts = anchors.options().dtype(at::kLong);
  const bool packed = doc_start.defined();
  const at::Tensor first = packed ? anchors - ctx_start : anchors;
  RopePositions p;
  p.block = (first.unsqueeze(-1) + at::arange(block_size, long_opts)).reshape({b, -1});
  p.context = at::arange(S, long_opts).unsqueeze(0).expand({b, S});
  if (packed) p.context = p.context - doc_start;
  return p;
}

at::Tensor drafter_hidden(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                          const at::Tensor& target_features, const at::Tensor& block_ids, const at::Tensor& anchors,
                          const at::Tensor& keep, CheckpointPolicy ckpt, const at::Tensor& doc_start,
                          const at::Tensor& ctx_start, ops::AttentionBackend attention) {
  const int64_t n_feat = int64_t(c.target_layer_ids.size()) * c.hidden_size;
  if (target_features.dim() != 3 || target_features.size(2) != n_feat)
    throw std::invalid_argument("drafter: target features must be [batch, S, " + std::to_string(n_feat) +
                                "] (" + std::to_string(c.target_layer_ids.size()) + " target layers x hidden " +
                                std::to_string(c.hidden_size) + ")");
  const int64_t b = target_features.size(0), S = target_features.size(1), B = c.block_size;
  if (anchors.dim() != 2 || anchors.size(0) != b || block_ids.sizes() != at::IntArrayRef({b, anchors.size(1) * B}))
    throw std::invalid_argument("drafter: anchors must be [batch, N] and block_ids [batch, N*block_size]");
  if (doc_start.defined() != ctx_start.defined() || (doc_start.defined() && doc_start.sizes() != at::IntArrayRef({b, S})) ||
      (ctx_start.defined() && ctx_start.sizes() != anchors.sizes()))
    throw std::invalid_argument("drafter: packed rows need both doc_start [batch, S] and ctx_start [batch, N]");
  const auto dtype = w.fc.scalar_type();

  const at::Tensor context =
      rms_norm(at::linear(target_features.to(dtype), w.fc), w.hidden_norm, c.rms_norm_eps);  // [b, S, H]
  at::Tensor x = at::embedding(t.embed, block_ids).to(dtype);                              // [b, T, H]

  const auto [block_pos, ctx_pos] = rope_positions(anchors, S, B, doc_start, ctx_start);
  const at::Tensor key_pos = at::cat({ctx_pos, block_pos}, 1);
  const models::RopeFrequencies rope = drafter_rope(c, key_pos);
  auto [q_cos, q_sin] = rope_tables(block_pos, rope, dtype);
  auto [k_cos, k_sin] = rope_tables(key_pos, rope, dtype);
  const LayerShared shared{context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start};
  const FamilyModel& family = model_of(c);
  family.check_weights(c, w, "drafter");

  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerShape s{c.num_attention_heads, c.num_key_value_heads, c.head_dim, B, c.window_for_layer(i),
                       c.rms_norm_eps, attention};
    x = family.decoder_layer(c, w, i, s, x, shared, ckpt.applies(i));
  }
  return rms_norm(x, w.norm, c.rms_norm_eps);
}

DrafterLossResult drafter_loss(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                               const at::Tensor& target_features, const at::Tensor& target_last_hidden,
                               const AnchorSample& anchors, const BlockBatch& blocks, const DrafterLossOptions& opt,
                               CheckpointPolicy ckpt) {
  DrafterLossResult r;
  r.hidden = drafter_hidden(c, w, t, target_features, blocks.block_ids, anchors.anchors, anchors.keep, ckpt,
                            anchors.doc_start, anchors.ctx_start, opt.attention);
  const int64_t B = c.block_size;
  const at::Tensor row_correct = model_of(c).objective(c, w, t, target_last_hidden, anchors, blocks, opt, r);
  r.loss_weight = blocks.weights.sum().to(at::kCPU, at::kDouble);
  // Per-slot statistics: rows are (batch, block, slot) flattened, so slot = row % B.
  const at::Tensor w_rows = blocks.weights.reshape({-1, B}).to(at::kDouble);
  const at::Tensor counted = (w_rows > 0).to(at::kDouble);
  r.slot_weight = w_rows.sum(0);
  r.slot_count = counted.sum(0);
  r.slot_correct = (row_correct.reshape({-1, B}).to(at::kDouble) * counted).sum(0);
  r.slot_accuracy = r.slot_correct / r.slot_count.clamp_min(1.0);
  return r;
}

}  // namespace dflash::drafter
