// Value checks and the choice of instruction set for the CPU fused cross-entropy rows kernel.
#include <string>

#include "anchor_attention_cpu_isa.h"
#include "cpu_isa.h"
#include "cross_entropy_rows.h"

namespace dflash::kernels {

std::string check_cross_entropy_rows(const CrossEntropyRowsArgs& a) {
  if (std::string bad = cpu_isa_switch_error(); !bad.empty()) return bad;
  if (a.dtype != ScalarType::Float32 && a.dtype != ScalarType::BFloat16)
    return "cross-entropy rows: logits must be float32 or bfloat16";
  if (a.rows < 0 || a.vocab <= 0 || a.ld < a.vocab) return "cross-entropy rows: need vocab > 0 and ld >= vocab";
  if (a.rows > 0 && (!a.logits || !a.labels || !a.lse || !a.ce || !a.correct || (a.write_grad && !a.scale)))
    return "cross-entropy rows: a pointer is missing";
  for (int64_t r = 0; r < a.rows; ++r)
    if (a.labels[r] < 0 || a.labels[r] >= a.vocab)
      return "cross-entropy rows: label " + std::to_string(a.labels[r]) + " of row " + std::to_string(r) +
             " is outside the vocabulary [0, " + std::to_string(a.vocab) + ")";
  return "";
}

void cross_entropy_rows_cpu(const CrossEntropyRowsArgs& a, int64_t r0, int64_t r1) {
  DFLASH_ISA_CALL(cross_entropy_rows, a, r0, r1);
}

}  // namespace dflash::kernels
