// Weights that hold NaN or Inf make a target generate garbage with exit 0 (an MXFP4 scale byte of 255 gave token 0
// forever): every weight a target loads is checked once, as the model will hold it (after dequantisation and after
// the conversion to the model's dtype), and refused naming the tensor.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace dflash::models {

// Throws std::runtime_error "target weights: tensor '<name>' holds 3 NaN/Inf values of 4096 (the first at [0, 17])
// <how>" when `held` (the tensor as the model keeps it) is not finite everywhere. `stored` is the tensor as read
// (before the dtype conversion): when it is finite, the message says the conversion to `held`'s dtype overflowed.
// `how` says where the values came from (" after dequantising MXFP4 ..."); may be empty.
void check_finite_weight(const at::Tensor& held, const at::Tensor& stored, const std::string& name,
                         const std::string& how = "");

// Whether every element of `t` is finite, checked in slices (no boolean copy of a large tensor).
bool all_finite(const at::Tensor& t);

}  // namespace dflash::models
