#include "drafter_context_cache.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "anchor_attention_op.h"
#include "family_model.h"
#include "few_rows_linear.h"
#include "norm_ops.h"

namespace dflash::eval {

using drafter::apply_rope;
using drafter::rms_norm;
using drafter::rope_tables;
using models::few_rows_linear;

void DrafterContextCache::reset() {
  length_ = 0;
  k_.clear();
  v_.clear();
}

void DrafterContextCache::crop(int64_t n) {
  if (n < 0 || n > length_) throw std::invalid_argument("DrafterContextCache::crop: bad length");
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l] = k_[l].narrow(2, 0, n);
    v_[l] = v_[l].narrow(2, 0, n);
  }
  length_ = n;
}

void DrafterContextCache::append(const at::Tensor& features) {
  const int64_t n = features.size(1);
  if (n == 0) return;
  const at::ScalarType dt = w_.fc.scalar_type();
  const at::Tensor ctx = rms_norm(few_rows_linear(features.to(dt), w_.fc), w_.hidden_norm, c_.rms_norm_eps);
  const at::Tensor pos = at::arange(length_, length_ + n, at::TensorOptions(at::kLong).device(w_.fc.device())).view({1, n});
  auto [cos, sin] = rope_tables(pos, drafter::drafter_rope(c_, pos), dt);
  const int64_t L = c_.num_hidden_layers;
  if (k_.empty()) k_.resize(static_cast<size_t>(L)), v_.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    const auto& w = w_.layers[static_cast<size_t>(l)];
    at::Tensor k = few_rows_linear(ctx, w[drafter::kKProj]).view({1, n, c_.num_key_value_heads, c_.head_dim});
    k = apply_rope(rms_norm(k, w[drafter::kKNorm], c_.rms_norm_eps), cos, sin).transpose(1, 2);
    at::Tensor v = few_rows_linear(ctx, w[drafter::kVProj]).view({1, n, c_.num_key_value_heads, c_.head_dim}).transpose(1, 2);
    auto& K = k_[static_cast<size_t>(l)];
    auto& V = v_[static_cast<size_t>(l)];
    K = K.defined() ? at::cat({K, k}, 2) : k.contiguous();
    V = V.defined() ? at::cat({V, v}, 2) : v.contiguous();
  }
  length_ += n;
}

at::Tensor DrafterContextCache::block_hidden(const at::Tensor& block_embeds) const {
  const int64_t B = block_embeds.size(1), a = length_, D = c_.head_dim;
  const int64_t qh = c_.num_attention_heads, kvh = c_.num_key_value_heads;
  const at::ScalarType dt = w_.fc.scalar_type();
  at::Tensor x = block_embeds.to(dt);
  const auto on_device = at::TensorOptions(at::kLong).device(w_.fc.device());
  const at::Tensor pos = at::arange(a, a + B, on_device).view({1, B});
  auto [cos, sin] = rope_tables(pos, drafter::drafter_rope(c_, pos), dt);
  const at::Tensor anchor = at::full({1}, a, on_device), keep = at::ones({1}, on_device.dtype(at::kBool));
  // A family may wrap each sublayer (family_model.h: e.g. in block convs, the block being one conv block).
  const drafter::FamilyModel& family = drafter::model_of(c_);
  family.check_weights(c_, w_, "DrafterContextCache");
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const auto& w = w_.layers[static_cast<size_t>(l)];
    auto attention = [&](const at::Tensor& h1) {
      at::Tensor q = few_rows_linear(h1, w[drafter::kQProj]).view({1, B, qh, D});
      q = apply_rope(rms_norm(q, w[drafter::kQNorm], c_.rms_norm_eps), cos, sin);
      at::Tensor kb = few_rows_linear(h1, w[drafter::kKProj]).view({1, B, kvh, D});
      kb = apply_rope(rms_norm(kb, w[drafter::kKNorm], c_.rms_norm_eps), cos, sin).transpose(1, 2);
      const at::Tensor vb = few_rows_linear(h1, w[drafter::kVProj]).view({1, B, kvh, D}).transpose(1, 2);
      at::Tensor K = kb, V = vb;
      if (a > 0) {
        K = at::cat({k_[static_cast<size_t>(l)], kb}, 2);
        V = at::cat({v_[static_cast<size_t>(l)], vb}, 2);
      }
      // One block anchored at the context's end: all cached context (or the sliding window) plus its own keys,
      // GQA heads never expanded. K/V go in as [1, a + B, kvh, D] views of the cache layout.
      const at::Tensor attn = ops::anchor_block_attention(q, K.transpose(1, 2), V.transpose(1, 2), anchor, keep, B,
                                                          c_.window_for_layer(l), std::nullopt, at::Tensor(), attention_);
      return few_rows_linear(attn.reshape({1, B, qh * D}), w[drafter::kOProj]);
    };
    // Not drafter::swiglu_down: that is the training op (autograd, at::linear over many rows); here a few rows
    // without gradients go through few_rows_linear.
    auto mlp = [&](const at::Tensor& h2) {
      const at::Tensor act = at::silu(few_rows_linear(h2, w[drafter::kGateProj])) * few_rows_linear(h2, w[drafter::kUpProj]);
      return few_rows_linear(act, w[drafter::kDownProj]);
    };
    const at::Tensor h1 = rms_norm(x, w[drafter::kInputNorm], c_.rms_norm_eps);
    x = x + family.wrap_sublayer(c_, w_, l, drafter::Sublayer::Attention, B, h1, attention);
    const at::Tensor h2 = rms_norm(x, w[drafter::kPostNorm], c_.rms_norm_eps);
    x = x + family.wrap_sublayer(c_, w_, l, drafter::Sublayer::Mlp, B, h2, mlp);
  }
  return rms_norm(x, w_.norm, c_.rms_norm_eps);
}

}  // namespace dflash::eval
