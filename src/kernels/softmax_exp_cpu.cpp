// The choice of instruction set for the softmax exp's own entry point (softmax_exp.h).
#include "softmax_exp.h"

#include "anchor_attention_cpu_isa.h"
#include "cpu_isa.h"

namespace dflash::kernels {

float softmax_exp_row_cpu(float* s, int64_t n, float scale, float offset) {
  DFLASH_ISA_CALL(softmax_exp_row, s, n, scale, offset);
}

}  // namespace dflash::kernels
