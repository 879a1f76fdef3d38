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

// DFlash2's selector candidates from the loss's own logits (row_top_k.h): each row's top k of
// unary_logits(logits, output_multiplier, final_logit_softcapping). k = 0: none.
struct UnaryTopKOptions {
  int64_t k = 0;
  double output_multiplier = 1.0;
  double final_logit_softcapping = 0.0;
};

struct ChunkedLossWithTopK {
  at::Tensor loss, row_ce, row_correct;  // as chunked_lm_loss's
  // [R, k] in hidden's dtype, by descending value, ties to the lower id. Rows of weight 0 are not computed:
  // they hold ids 0..k-1 with logits 0.
  at::Tensor top_ids, top_logits;
};

// chunked_lm_loss plus the top-K of the rows it computes, with no second LM-head pass. C++ only (not in the op's
// schema); top.k < 0 is std::invalid_argument. On the CPU the top-K is a scan of each chunk's logits, elsewhere
// row_top_k_by_threshold (row_top_k.h).
ChunkedLossWithTopK chunked_lm_loss_with_top_k(const at::Tensor& hidden, const at::Tensor& lm_head,
                                               const at::Tensor& labels, const at::Tensor& weights,
                                               const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                                               const ChunkedLossOptions& opt, const UnaryTopKOptions& top);

// Empty when the arguments are usable, else what is wrong (the message both error paths use).
std::string check_chunked_lm_loss_args(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                       const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                                       const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows,
                                       double kl_weight);

}  // namespace dflash::ops
