// Value checks and the choice of instruction set for the CPU fused DSpark objective rows kernel.
#include <cmath>
#include <string>

#include "anchor_attention_cpu_isa.h"
#include "cpu_isa.h"
#include "dspark_objective_rows.h"

namespace dflash::kernels {

std::string check_dspark_rows(const DSparkRowsArgs& a) {
  if (a.dtype != ScalarType::Float32 && a.dtype != ScalarType::BFloat16)
    return "dspark rows: logits must be float32 or bfloat16";
  if (a.rows < 0 || a.vocab <= 0 || a.ld < a.vocab || (a.teacher && a.teacher_ld < a.vocab))
    return "dspark rows: need vocab > 0, ld >= vocab and teacher_ld >= vocab";
  if (a.rows > 0 && (!a.logits || !a.labels || !a.lse || !a.ce || !a.l1 || !a.accept || !a.correct))
    return "dspark rows: a pointer is missing";
  if (a.rows > 0 && (a.write_grad || a.confidence) && !a.scale) return "dspark rows: scale is missing";
  if (a.confidence && !a.teacher) return "dspark rows: the confidence head needs the teacher's logits";
  if (a.rows > 0 && a.confidence && (!a.bce || (a.write_grad && !a.dconf)))
    return "dspark rows: a confidence output pointer is missing";
  if (a.teacher_rows) {
    if (!a.teacher) return "dspark rows: teacher_rows without the teacher's logits";
    for (int64_t r = 0; r < a.rows; ++r)
      if (a.teacher_rows[r] < 0 || a.teacher_rows[r] >= a.teacher_count)
        return "dspark rows: teacher row " + std::to_string(a.teacher_rows[r]) + " of row " + std::to_string(r) +
               " is outside [0, " + std::to_string(a.teacher_count) + ")";
  }
  for (float w : {a.ce_weight, a.l1_weight, a.confidence_weight})
    if (!std::isfinite(w) || w < 0) return "dspark rows: the loss weights must be finite and >= 0";
  for (int64_t r = 0; r < a.rows; ++r)
    if (a.labels[r] < 0 || a.labels[r] >= a.vocab)
      return "dspark rows: label " + std::to_string(a.labels[r]) + " of row " + std::to_string(r) +
             " is outside the vocabulary [0, " + std::to_string(a.vocab) + ")";
  return "";
}

void dspark_rows_cpu(const DSparkRowsArgs& a, int64_t r0, int64_t r1) { DFLASH_ISA_CALL(dspark_rows, a, r0, r1); }

}  // namespace dflash::kernels
