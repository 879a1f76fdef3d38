// The softmax exp every CPU kernel uses (cpu_math.inc's row_exp), on its own: s[t] := exp(s[t] * scale - offset)
// for t in [0, n), returning the sum of the new values, on the instruction set the kernels run with
// (cpu_isa.h). The kernels reach it inline; this entry point lets tests check its special values
// (NaN stays NaN, +inf gives inf, -inf gives an exact 0) on every instruction set.
#pragma once
#include <cstdint>

namespace dflash::kernels {

float softmax_exp_row_cpu(float* s, int64_t n, float scale, float offset);

}  // namespace dflash::kernels
