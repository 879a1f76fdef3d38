// DSpark's training objective on the drafter's final hidden states (docs/DSPARK.md): the Markov
// features and confidence logits of every slot (dspark_heads.h, teacher-forced previous tokens), then the chunked
// LM-head objective dflash::dspark_lm_loss (CE on gold, L1 to the target's distribution, confidence BCE), and the
// sums behind DeepSpec's train metrics, which add up over micro-batches, workers and processes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "block_batch.h"
#include "drafter_config.h"
#include "drafter_weights.h"
#include "dspark_lm_loss_op.h"

namespace dflash::drafter {

struct FrozenTarget;

// The stats vector's layout (float64, length dspark_stats_size(B)): weighted term sums ce, l1, conf and their
// denominator sum(w) (no epsilon: DeepSpec logs num / den); tau sum and blocks; confidence abs error, bias, cumprod bias sums and their
// denominator sum(w); then per slot sum(a* m) and sum(m) (m = [w > 0]).
enum DSparkStat : int64_t {
  kStatCe, kStatL1, kStatConf, kStatDen, kStatTau, kStatBlocks, kStatConfAbs, kStatConfBias, kStatConfCum,
  kStatConfDen, kStatSlots
};
inline int64_t dspark_stats_size(int64_t block_size) { return kStatSlots + 2 * block_size; }

struct DSparkObjective {
  at::Tensor loss;         // scalar, differentiable wrt hidden and the drafter's heads
  at::Tensor stats;        // [dspark_stats_size(B)] float64 on the CPU
  at::Tensor row_correct;  // [rows] bool: argmax of the Markov-corrected logits == label
};

// hidden [b, N*B, H] (final-normed), target_last_hidden [b, S, H] (the target's final-normed last hidden state:
// the teacher), blocks from build_dspark_block_batch, keep [b, N].
DSparkObjective dspark_objective(const DrafterConfig& c, const DrafterWeights& w, const at::Tensor& lm_head,
                                 const at::Tensor& hidden, const at::Tensor& target_last_hidden,
                                 const at::Tensor& keep, const BlockBatch& blocks, const ops::DSparkLossOptions& opt);

// The per-block sums of DeepSpec's metrics from per-slot values [n, B] (accept a*, weights w, confidence logits
// c or undefined) and keep [n]: what dspark_objective adds to its stats (the terms excluded).
at::Tensor dspark_metric_sums(const at::Tensor& accept, const at::Tensor& weights, const at::Tensor& confidence,
                              const at::Tensor& keep);

// Named metrics from summed stats: ce_loss, l1_loss, confidence_loss, tau_probabilistic, accept_rate@j and, with
// the confidence head, confidence_abs_error, confidence_bias, confidence_cumprod_bias.
std::vector<std::pair<std::string, double>> dspark_metrics(const at::Tensor& stats, int64_t block_size,
                                                           bool confidence_head);

}  // namespace dflash::drafter
