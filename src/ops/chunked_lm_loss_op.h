// dflash::chunked_lm_loss: weighted block cross-entropy (+ optional soft labels) through the frozen LM head,
// in chunks of rows, as a LibTorch op with autograd. At most one chunk of logits exists at a time; when
// hidden needs a gradient it is computed in the same pass (no logits are recomputed in backward).
// Also callable from Python after torch.ops.load_library("libdflash_ops.so"):
//   torch.ops.dflash.chunked_lm_loss(hidden, lm_head, labels, weights, teacher_hidden, teacher_index,
//                                    chunk_rows, kl_weight, fused_ce) -> (loss, row_ce, row_correct)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

struct ChunkedLossOptions {
  int64_t chunk_rows = 1024;
  // loss_row = (1 - kl_weight) * CE(student, label) + kl_weight * KL(teacher || student).
  double kl_weight = 0.0;
  // Hard labels on CPU with float32/bf16 hidden: the fused cross-entropy kernel
  // (src/kernels/cross_entropy_rows.h) instead of the generic ATen passes. false: always the generic path.
  bool fused_ce = true;
};

// hidden [R, H] (the drafter's final hidden states; the only input that gets a gradient),
// lm_head [V, H] (frozen), labels [R] int64, weights [R] (any float; rows with weight 0 are skipped),
// teacher_hidden [M, H] + teacher_index [R] (the target's last hidden state rows; both undefined when
// kl_weight == 0).
// Returns (loss = sum(w * loss_row) / sum(w) in float32 (float64 for fp64 hidden),
//          row_ce [R] (0 for skipped rows), row_correct [R] bool (argmax == label)); only loss has a gradient.
// Bad arguments throw std::invalid_argument here (c10::ValueError, Python's ValueError, through the
// dispatcher), with the same message.
std::tuple<at::Tensor, at::Tensor, at::Tensor> chunked_lm_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                                               const at::Tensor& labels, const at::Tensor& weights,
                                                               const at::Tensor& teacher_hidden,
                                                               const at::Tensor& teacher_index,
                                                               const ChunkedLossOptions& opt);

// Empty when the arguments are usable, else what is wrong (the message both error paths use).
std::string check_chunked_lm_loss_args(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                       const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                                       const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows,
                                       double kl_weight);

}  // namespace dflash::ops
