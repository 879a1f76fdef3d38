#include "drafter_model.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "decoder_layer.h"
#include "dspark_loss.h"
#include "dflash2_layer.h"
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
  const bool dflash2 = c.family == DrafterFamily::DFlash2;
  if (dflash2 && int64_t(w.convs.size()) != c.num_hidden_layers)
    throw std::invalid_argument("drafter: a DFlash2 config needs the weights' convs (" +
                                std::to_string(c.num_hidden_layers) + " layers), got " + std::to_string(w.convs.size()));

  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerShape s{c.num_attention_heads, c.num_key_value_heads, c.head_dim, B, c.window_for_layer(i),
                       c.rms_norm_eps, attention};
    if (dflash2) {  // the DFlash2 layer: the same sublayers wrapped in their block convs
      const LayerConvWeights& cv = w.convs[size_t(i)];
      const int64_t G = c.dflash2.conv_group_size;
      x = ckpt.applies(i) ? checkpointed_dflash2_decoder_layer(w.layers[size_t(i)], cv, s, G, x, shared)
                          : dflash2_decoder_layer(w.layers[size_t(i)], cv, s, G, x, shared);
      continue;
    }
    x = ckpt.applies(i) ? checkpointed_decoder_layer(w.layers[size_t(i)], s, x, shared)
                        : decoder_layer(w.layers[size_t(i)], s, x, shared);
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
  const int64_t H = c.hidden_size, B = c.block_size;
  at::Tensor row_correct;
  if (c.family == DrafterFamily::DSpark) {
    DSparkObjective o = dspark_objective(c, w, t.lm_head, r.hidden, target_last_hidden, anchors.keep, blocks, opt.dspark);
    r.loss = o.loss;
    r.family_stats = o.stats;
    row_correct = o.row_correct;
  } else {
    const bool soft = opt.chunk.kl_weight != 0.0;
    if (soft && !target_last_hidden.defined())
      throw std::invalid_argument("drafter_loss: kl_weight > 0 needs the target's last hidden states");
    const at::Tensor teacher = soft ? target_last_hidden.reshape({-1, H}) : at::Tensor();
    // DFlash2 on the CPU: the selector's top-K comes from the unary loss's own logits (no second LM-head pass).
    const bool dflash2 = c.family == DrafterFamily::DFlash2;
    ops::UnaryTopKOptions top;
    if (dflash2 && r.hidden.device().is_cpu())
      top = {opt.dflash2.selector.top_k, opt.dflash2.selector.unary.output_multiplier,
             opt.dflash2.selector.unary.final_logit_softcapping};
    const ops::ChunkedLossWithTopK u = ops::chunked_lm_loss_with_top_k(
        r.hidden.reshape({-1, H}), t.lm_head, blocks.labels, blocks.weights, teacher, blocks.teacher_index, opt.chunk,
        top);
    r.loss = u.loss;
    row_correct = u.row_correct;
    if (dflash2) {
      DFlash2LossOptions o = opt.dflash2;
      o.chunk_rows = opt.chunk.chunk_rows;
      Candidates given;
      if (top.k > 0) {
        const auto shape = r.hidden.sizes().slice(0, 2).vec();
        given = {u.top_ids.view({shape[0], shape[1], top.k}), u.top_logits.view({shape[0], shape[1], top.k})};
      }
      if (o.selector_weight == 0.0) {  // measured only
        at::NoGradGuard no_grad;
        r.dflash2 = dflash2_selector_objective(w.selector, r.hidden, t.lm_head, blocks, B, o, given);
      } else {
        r.dflash2 = dflash2_selector_objective(w.selector, r.hidden, t.lm_head, blocks, B, o, given);
        r.loss = r.loss + o.selector_weight * r.dflash2.selector_loss.to(r.loss.scalar_type());
      }
    }
  }
  r.loss_weight = blocks.weights.sum().to(at::kCPU, at::kDouble);
  if (c.family == DrafterFamily::DSpark) r.loss_eps = opt.dspark.den_eps;
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
