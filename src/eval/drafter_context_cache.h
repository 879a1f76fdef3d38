// The drafter at inference (a family that wraps the block sublayers, family_model.h, wraps them here too, never
// touching the context): the context features of committed tokens become per-layer keys/values once
// (k_proj/k_norm/RoPE and v_proj on hidden_norm(fc(features))) and are cached; each cycle only the B block tokens
// run through the layers, attending to all cached context (all positions < anchor) and to their own block.
// Sliding-window layers keep docs/DFLASH.md's window and in-block causality.
// Same numbers as drafter_hidden() with one block anchored at the context length (tests check this): the same
// anchor-block attention op, fused or reference. Runs on the device of the weights; features and block
// embeddings must be there too.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "attention_backend.h"
#include "drafter_config.h"
#include "drafter_weights.h"

namespace dflash::eval {

class DrafterContextCache {
 public:
  DrafterContextCache(const drafter::DrafterConfig& c, const drafter::DrafterWeights& w,
                      ops::AttentionBackend attention = ops::AttentionBackend::Fused)
      : c_(c), w_(w), attention_(attention) {}

  int64_t length() const { return length_; }
  void reset();
  // features [1, n, num_target_layers_used * H] for positions length() .. length()+n-1.
  void append(const at::Tensor& features);
  // Keeps the first n context positions.
  void crop(int64_t n);
  // block_embeds [1, B, H] (embedding of [last, MASK...]) for the block anchored at length() ->
  // final-normed hidden states [1, B, H].
  at::Tensor block_hidden(const at::Tensor& block_embeds) const;

 private:
  const drafter::DrafterConfig& c_;
  const drafter::DrafterWeights& w_;
  ops::AttentionBackend attention_;
  int64_t length_ = 0;
  std::vector<at::Tensor> k_, v_;  // per layer [1, kv_heads, length, head_dim]
};

}  // namespace dflash::eval
