// DSpark's objective over rows of LM-head logits (docs/DSPARK.md), fused for the chunked loss on the CPU: per row
// the CE against the gold label, the L1 between the drafter's softmax q and the teacher's pi, the confidence target
// a* = clamp(1 - L1/2, 0, 1), the confidence BCE and, when asked, d loss / d logits written over the logits in
// place (in their own dtype, ready for the backward GEMMs). Each row is held in float32 (in place for float32
// logits, in a per-thread row buffer for bfloat16) and walked a few times while it is in cache: no softmax or
// difference tensors of [rows, V]. Framework-free.
#pragma once
#include <cstdint>
#include <string>

#include "scalar_types.h"

namespace dflash::kernels {

struct DSparkRowsArgs {
  ScalarType dtype = ScalarType::Float32;  // of the logits and the teacher's: Float32 or BFloat16 (math in float32)
  int64_t rows = 0, vocab = 0, ld = 0;     // ld: elements between logits rows (>= vocab)
  int64_t teacher_ld = 0;                  // elements between teacher rows (>= vocab)
  void* logits = nullptr;                  // [rows, ld] drafter logits (Markov bias included)
  // [rows, teacher_ld] teacher logits, or null: no L1 / confidence (l1 and accept are then 0). Float32 teacher
  // rows are used as scratch (left holding q - pi) unless teacher_rows is set; bfloat16 ones are left as they were.
  void* teacher = nullptr;
  // [rows] or null: row r's teacher is teacher row teacher_rows[r] (in [0, teacher_count)), so rows that share a
  // target position share one row of teacher logits (issue 51: the teacher's GEMM once per distinct position).
  // Shared rows are only read: float32 ones are copied to the per-thread scratch instead of used in place.
  const int64_t* teacher_rows = nullptr;
  int64_t teacher_count = 0;
  const int64_t* labels = nullptr;         // [rows], each in [0, vocab)
  const float* scale = nullptr;            // [rows]: w / den of the row (with write_grad or confidence)
  float ce_weight = 0.1f, l1_weight = 0.9f, confidence_weight = 1.0f;
  // logits := scale (q (ce_w + l1_w (s - <s, q>)) - ce_w onehot(label)) with s = sign(q - pi) (sign(0) = 0).
  // Without it float32 logits are left holding q (the kernel's scratch); bfloat16 logits as they were.
  bool write_grad = false;
  const float* confidence = nullptr;       // [rows] raw confidence logits c, or null (needs the teacher)
  float* lse = nullptr;                    // [rows] out: logsumexp of the logits
  float* ce = nullptr;                     // [rows] out: lse - logit[label]
  float* l1 = nullptr;                     // [rows] out: sum |q - pi| (0 without the teacher)
  float* accept = nullptr;                 // [rows] out: clamp(1 - l1/2, 0, 1) (0 without the teacher)
  uint8_t* correct = nullptr;              // [rows] out: 1 when the first argmax is the label
  float* bce = nullptr;                    // [rows] out with confidence: BCE-with-logits(c, a*)
  float* dconf = nullptr;                  // [rows] out with confidence and write_grad: conf_w scale (sigmoid(c) - a*)
};

// Empty when usable, else what is wrong (labels are checked too).
std::string check_dspark_rows(const DSparkRowsArgs& a);

// Rows [r0, r1); disjoint ranges may run on different threads at once.
void dspark_rows_cpu(const DSparkRowsArgs& a, int64_t r0, int64_t r1);

}  // namespace dflash::kernels
