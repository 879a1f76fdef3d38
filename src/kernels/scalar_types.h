// Scalar types the kernels read and write, without any framework headers.
#pragma once
#include <cstdint>

namespace dflash::kernels {

enum class ScalarType : int { Float32, Float64, BFloat16, Float16 };  // Float16: CUDA kernels only

// bfloat16 with the same bit layout as at::BFloat16 / __nv_bfloat16, so buffers can be reinterpreted.
struct bf16 {
  uint16_t bits;
};

// Conversions live in cpu_math.inc, compiled separately for each instruction set.

}  // namespace dflash::kernels
