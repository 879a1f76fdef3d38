// DSpark's heads on top of the DFlash backbone (docs/DSPARK.md, DeepSpec markov_head.py /
// common.py), under DeepSpec's checkpoint names, so that export is a plain copy:
//   markov_head.markov_w1.weight      [V, r]       W1, the previous-token embedding
//   markov_head.markov_w2.weight      [V, r]       W2, the r -> V projection (a Linear weight, no bias)
//   markov_head.gate_proj.{weight,bias}   [r, d+r], [r]     gated only; input [h; W1[p]]
//   markov_head.joint_proj.{weight,bias}  [3r, 2r+d], [3r]  rnn only; input [s; W1[p]; h] -> (gate, cand, out)
//   confidence_head.proj.{weight,bias}    [1, d(+r)], [1]   input [h; W1[p]] with confidence_head_with_markov
// Every Markov variant adds a bias W2 u_j to slot j's logits, with a "Markov feature" u_j in R^r:
//   vanilla u = W1[p];  gated u = sigmoid(Wg [h; W1[p]] + bg) * W1[p];
//   rnn [g, c, o] = Wj [s; W1[p]; h] + bj, s <- sigmoid(g) s + (1 - sigmoid(g)) tanh(c), u = tanh(o)  (s_{-1} = 0).
// The loss keeps u (rows x r) and applies W2 inside the chunked LM-head pass (dspark_lm_loss_op.h): no
// [rows, V] bias tensor. The frozen target embedding and LM head are the target's own, never copied here.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "markov_heads.h"

namespace dflash::drafter {

extern const char* const kMarkovW1;         // markov_head.markov_w1.weight
extern const char* const kMarkovW2;         // markov_head.markov_w2.weight
extern const char* const kMarkovGateW;      // markov_head.gate_proj.weight
extern const char* const kMarkovGateB;      // markov_head.gate_proj.bias
extern const char* const kMarkovJointW;     // markov_head.joint_proj.weight
extern const char* const kMarkovJointB;     // markov_head.joint_proj.bias
extern const char* const kConfidenceW;      // confidence_head.proj.weight
extern const char* const kConfidenceB;      // confidence_head.proj.bias

// (name, shape) of the heads' tensors for vocabulary V and hidden size d, in the order above (those the
// settings use: none of the Markov head at rank 0, gate/joint only for their variant, the confidence head only
// when enabled).
std::vector<std::pair<std::string, std::vector<int64_t>>> dspark_head_shapes(const DSparkHeads& h, int64_t vocab,
                                                                             int64_t hidden);

// The heads' tensors (undefined where the settings have none).
struct DSparkHeadWeights {
  at::Tensor markov_w1, markov_w2, gate_w, gate_b, joint_w, joint_b, conf_w, conf_b;
};

// Looks the tensors up by name among `named` (the drafter's named(), or any list); throws std::invalid_argument
// naming a missing one.
DSparkHeadWeights dspark_head_weights(const DSparkHeads& h,
                                      const std::vector<std::pair<std::string, at::Tensor>>& named);

// Teacher-forced Markov features u [..., B, r] for the slots of blocks: hidden [..., B, d] (final-normed),
// prev [..., B] int64 (the previous token of each slot). The rnn state starts at 0 in every block. Undefined at
// rank 0. Differentiable with respect to hidden and the head's weights.
at::Tensor markov_features(const DSparkHeads& h, const DSparkHeadWeights& w, const at::Tensor& hidden,
                           const at::Tensor& prev);

// One position of the head at inference: hidden [n, d], prev [n] int64, state [n, r] (rnn; undefined = zeros,
// ignored by the other variants). Returns (u [n, r], the new state: undefined unless rnn).
std::pair<at::Tensor, at::Tensor> markov_step(const DSparkHeads& h, const DSparkHeadWeights& w,
                                              const at::Tensor& hidden, const at::Tensor& prev,
                                              const at::Tensor& state = {});

// The logit bias W2 u [..., V] of features u [..., r] (inference and tests: training never forms it).
at::Tensor markov_bias(const DSparkHeadWeights& w, const at::Tensor& features);

// Raw confidence logits c [...] = w . [h; W1[p]] + b (or w . h + b): hidden [..., d], prev [...] int64.
// Undefined when the head is off.
at::Tensor confidence_logits(const DSparkHeads& h, const DSparkHeadWeights& w, const at::Tensor& hidden,
                             const at::Tensor& prev);

}  // namespace dflash::drafter
