// The chunked loss's fused CPU cross-entropy kernel (src/kernels/cross_entropy_rows.h) checked against the loss's
// generic ATen path, as the attention is checked against its reference (attention_selfcheck.h): training runs
// it before step 1 on CPU workers that would use the kernel (fp32/bf16, hard labels) and falls back to the
// generic path when it fails; `dflash doctor` can run it too.
//
// Inputs: `rows` hidden rows of the spec's size drawn from N(0, 1), an LM head [vocab, hidden] from N(0, 1/hidden),
// random labels and weights (some zero), chunks of rows/2. Compared: the loss and d loss / d hidden, by the rule of
// selfcheck_tolerance.h with the generic path in the dtype as the low-precision computation and in fp64 as exact.
// DSpark's fused objective kernel (src/kernels/dspark_objective_rows.h), behind the same switch, is checked in the
// same call on the same rows (with a Markov bias, teacher rows and confidence logits): loss, dhidden and dW2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "selfcheck_tolerance.h"

namespace dflash::ops {

struct LossCheckSpec {
  at::ScalarType dtype = at::kFloat;  // fp32 or bf16 (the kernel's dtypes)
  int64_t hidden = 256, vocab = 4096, rows = 32;
  uint64_t seed = 0;
  std::string describe() const;  // "cpu fp32, H 256, V 4096, 32 rows"
};

struct LossCheckResult {
  LossCheckSpec spec;
  bool passed = false;
  std::string exception;           // first line of what the fused path threw; empty when it ran
  std::vector<TensorCheck> tensors;  // loss, dhidden, dspark loss, dspark dhidden, dspark dW2
  std::string summary() const;     // as AttentionCheckResult::summary()
};

LossCheckResult check_fused_cross_entropy(const LossCheckSpec& spec);

// The vocabulary a check uses for a head of `vocab` rows: all of it up to 2048 rows, else 2048 plus the head's
// remainder modulo 64 (so the kernel's vector tail sees the same length), bounding the check's cost.
int64_t loss_check_vocab(int64_t vocab);

}  // namespace dflash::ops
