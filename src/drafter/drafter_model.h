// The DFlash drafter forward and its training loss (docs/DFLASH.md "The drafter" and "The loss").
#pragma once
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "attention_backend.h"
#include "block_batch.h"
#include "checkpoint_policy.h"
#include "chunked_loss.h"
#include "drafter_config.h"
#include "drafter_weights.h"
#include "dspark_lm_loss_op.h"
#include "loss_weighting.h"
#include "selector_objective_types.h"

namespace dflash::drafter {

// The frozen pieces borrowed from the target. With tie_word_embeddings the caller passes the same tensor twice.
struct FrozenTarget {
  at::Tensor embed;    // [V, H]
  at::Tensor lm_head;  // [V, H]
};

// RoPE positions: context position p -> p, block slot k of the block anchored at a -> a + k. Packed rows
// (doc_start [b, S], ctx_start [b, N] defined) count both from the document's start, as if each document were
// its own sequence. Rotary scores depend on position differences only, so this changes no result in exact
// arithmetic; it keeps the positions, and so the rounding, those of the unpacked documents.
struct RopePositions {
  at::Tensor block;    // [b, N*B]
  at::Tensor context;  // [b, S]
};
RopePositions rope_positions(const at::Tensor& anchors, int64_t S, int64_t block_size,
                             const at::Tensor& doc_start = at::Tensor(), const at::Tensor& ctx_start = at::Tensor());

// target_features [b, S, n*H] (target layers in target_layer_ids order), block_ids [b, N*B],
// anchors/keep [b, N] -> final hidden states norm(layers(...)) [b, N*B, H].
// Packed rows: doc_start [b, S] (each token's document start) and ctx_start [b, N] (each block's) make every
// block see only its own document and restart RoPE positions at each document; undefined = one per row.
// attention: Fused or Reference (a run picks it per device before its first step, attention_selfcheck.h).
at::Tensor drafter_hidden(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                          const at::Tensor& target_features, const at::Tensor& block_ids, const at::Tensor& anchors,
                          const at::Tensor& keep, CheckpointPolicy ckpt = {}, const at::Tensor& doc_start = at::Tensor(),
                          const at::Tensor& ctx_start = at::Tensor(),
                          ops::AttentionBackend attention = ops::AttentionBackend::Fused);

struct DrafterLossOptions {
  double gamma = 0;  // 0: default_loss_gamma(block_size); +inf: no decay
  ChunkedLossOptions chunk;
  ops::DSparkLossOptions dspark;  // family dspark: its objective's weights and chunk rows (dspark_loss.h)
  ops::AttentionBackend attention = ops::AttentionBackend::Fused;  // Fused or Reference
  DFlash2LossOptions dflash2;  // family dflash2: alpha and the selector's CE (its chunk_rows: chunk.chunk_rows)
};

struct DrafterLossResult {
  at::Tensor loss;            // scalar, differentiable wrt the drafter weights
  // What `loss` was divided by: sum w of the rows (float64 scalar), plus loss_eps (DSpark: DeepSpec's 1e-6; 0
  // otherwise). loss * (loss_weight + loss_eps) is the unnormalised sum over rows, which adds up across
  // micro-batches: the trainer divides the step's total by the step's sum w (+ loss_eps once), so a step means the
  // same however it is split.
  at::Tensor loss_weight;
  double loss_eps = 0;
  at::Tensor hidden;          // [b, N*B, H] final hidden states
  at::Tensor slot_correct;    // [B] number of weighted rows whose argmax == label, per slot
  at::Tensor slot_count;      // [B] number of rows with weight > 0, per slot
  at::Tensor slot_weight;     // [B] sum of loss weights per slot
  at::Tensor slot_accuracy;   // [B] correct / count (0 where count == 0)
  at::Tensor family_stats;    // the family's metric sums (DSpark: dspark_loss.h's layout), float64 CPU; or undefined
  DFlash2Stats dflash2;       // family dflash2: L_sel and the selector's sums (loss = unary + alpha L_sel)
};

// One training forward: hidden states of `blocks` (from build_block_batch) and the chunked loss (packed rows
// when `anchors` carries doc_start / ctx_start).
// target_last_hidden [b, S, H] feeds the soft-label teacher (may be undefined when kl_weight == 0).
// Family dspark: `blocks` from build_dspark_block_batch, the objective of dspark_loss.h (target_last_hidden is its
// teacher).
DrafterLossResult drafter_loss(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                               const at::Tensor& target_features, const at::Tensor& target_last_hidden,
                               const AnchorSample& anchors, const BlockBatch& blocks, const DrafterLossOptions& opt,
                               CheckpointPolicy ckpt = {});

}  // namespace dflash::drafter
