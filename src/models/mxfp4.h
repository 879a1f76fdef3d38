// MXFP4, how the published gpt-oss checkpoints store their expert matrices: each row of K values is K / 32 blocks
// of 32 four-bit E2M1 values (16 bytes, the low nibble first) sharing one E8M0 scale byte 2^(s - 127).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace dflash::models {

// blocks [..., G, 16] uint8 and scales [..., G] uint8 -> float32 [..., G * 32], the same values as transformers'
// convert_moe_packed_tensors before its transpose (value * 2^(s - 127) in float32; 254 can overflow to inf, which the
// loader refuses). `name` (the tensor's checkpoint name) prefixes errors: wrong dtypes or shapes, and a scale byte of
// 255 (E8M0's NaN, which transformers reads as 2^128).
at::Tensor mxfp4_dequantize(const at::Tensor& blocks, const at::Tensor& scales, const std::string& name);

}  // namespace dflash::models
