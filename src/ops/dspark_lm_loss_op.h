// dflash::dspark_lm_loss: DSpark's objective (docs/DSPARK.md, DeepSpec loss.py) through the frozen LM
// head, in chunks of rows like dflash::chunked_lm_loss (chunked_lm_loss_op.h), as a LibTorch op with autograd.
// Per row (a block slot) with Markov-corrected logits l = lm_head h + W2 u and teacher logits z = lm_head t:
//   ce   = CE(l, gold label)
//   l1   = || softmax(l) - softmax(z) ||_1                          (the full L1, 2 x TV)
//   a*   = clamp(1 - l1/2, 0, 1)                                    (stop-gradient)
//   conf = BCE-with-logits(c, a*)
//   L = (ce_w sum w ce + l1_w sum w l1 + conf_w sum w conf) / (sum w + den_eps)      (DeepSpec: 0.1, 0.9, 1.0, 1e-6)
// One chunk of rows x V logits (and the teacher's) exists at a time; every gradient (hidden, u, W2, c) is computed
// in the same pass while the chunk's logits exist, as chunked_lm_loss does. Never a [rows, V] tensor for the batch.
// On the CPU (float32 / bf16) each chunk's rows go through one fused kernel (dspark_objective_rows.h).
// Also callable from Python after torch.ops.load_library("libdflash_ops.so"):
//   torch.ops.dflash.dspark_lm_loss(hidden, lm_head, labels, weights, markov, markov_w2, teacher_hidden,
//       teacher_index, confidence, chunk_rows, ce_weight, l1_weight, confidence_weight, den_eps, fused)
//       -> (loss, terms [3] = (L_ce, L_l1, L_conf), row_accept [R], row_correct [R])
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

struct DSparkLossOptions {
  int64_t chunk_rows = 1024;
  double ce_weight = 0.1, l1_weight = 0.9, confidence_weight = 1.0;
  double den_eps = 1e-6;  // DeepSpec adds it to the denominator
  // The fused CPU kernel (src/kernels/dspark_objective_rows.h) for float32 / bf16 on the CPU; false: the generic
  // ATen passes everywhere (the comparison). CUDA and float64 always run the generic passes.
  bool fused = true;
};

struct DSparkLossOutputs {
  at::Tensor loss;         // scalar (float32; float64 for fp64 hidden), differentiable
  at::Tensor terms;        // [3]: L_ce, L_l1, L_conf (each sum w term / (sum w + den_eps)); no gradient
  at::Tensor row_accept;   // [R] a* per row (0 for rows of weight 0 and without a teacher); no gradient
  at::Tensor row_correct;  // [R] bool: argmax of the Markov-corrected logits == label
};

// hidden [R, H] (final-normed drafter states), lm_head [V, H] (frozen), labels [R] int64, weights [R] >= 0 (rows of
// weight 0 are skipped), markov [R, r] + markov_w2 [V, r] (the Markov features and W2; both undefined = no bias),
// teacher_hidden [M, H] + teacher_index [R] (the target's final-normed last hidden states; needed when l1_weight > 0
// or with confidence), confidence [R] raw logits (undefined = no confidence head). Gradients flow to hidden, markov,
// markov_w2 and confidence. Bad arguments throw std::invalid_argument (c10::ValueError through the dispatcher).
DSparkLossOutputs dspark_lm_loss(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                 const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& markov_w2,
                                 const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                                 const at::Tensor& confidence, const DSparkLossOptions& opt);

// Empty when the arguments are usable, else what is wrong.
std::string check_dspark_lm_loss_args(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                      const at::Tensor& weights, const std::optional<at::Tensor>& markov,
                                      const std::optional<at::Tensor>& markov_w2,
                                      const std::optional<at::Tensor>& teacher_hidden,
                                      const std::optional<at::Tensor>& teacher_index,
                                      const std::optional<at::Tensor>& confidence, const DSparkLossOptions& opt);

}  // namespace dflash::ops
