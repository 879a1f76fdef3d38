// Hard-label cross-entropy over rows of LM-head logits, fused for the chunked training loss: per row one
// pass for the max, one for the exp sum, and (when asked) one that writes d loss / d logits over the
// logits in place, in their own dtype, ready for the backward GEMM. Replaces a float32 copy of the chunk,
// logsumexp, argmax and four in-place passes. Framework-free.
#pragma once
#include <cstdint>
#include <string>

#include "scalar_types.h"

namespace dflash::kernels {

struct CrossEntropyRowsArgs {
  ScalarType dtype = ScalarType::Float32;  // of the logits: Float32 or BFloat16 (math in float32)
  int64_t rows = 0, vocab = 0, ld = 0;     // ld: elements between rows (>= vocab)
  void* logits = nullptr;                  // [rows, ld]; with write_grad: overwritten by the gradient
  const int64_t* labels = nullptr;         // [rows], each in [0, vocab)
  const float* scale = nullptr;            // [rows]: d loss / d ce of the row (with write_grad)
  // logits := (softmax - onehot(label)) * scale. Without it float32 logits are left holding exp(logit - row max)
  // (the kernel's scratch); bfloat16 logits are left as they were.
  bool write_grad = false;
  float* lse = nullptr;                    // [rows] out: logsumexp
  float* ce = nullptr;                     // [rows] out: lse - logit[label]
  uint8_t* correct = nullptr;              // [rows] out: 1 when the first argmax is the label
};

// Empty when usable, else what is wrong (labels are checked too).
std::string check_cross_entropy_rows(const CrossEntropyRowsArgs& a);

// Rows [r0, r1); disjoint ranges may run on different threads at once.
void cross_entropy_rows_cpu(const CrossEntropyRowsArgs& a, int64_t r0, int64_t r1);

}  // namespace dflash::kernels
