// Test-only fault injection into the fused kernels, so that the self-checks and fallbacks (attention_backend
// auto / fused, the loss's CPU cross-entropy kernel) can be tested on a machine whose kernels work. Never on by
// default:
//   DFLASH_FAULT_INJECT=attention_wrong       the fused attention's output and gradients come back scaled by 9/8
//                                             (a kernel computing plausible but wrong numbers)
//   DFLASH_FAULT_INJECT=attention_throw       the fused attention throws (a kernel that cannot launch)
//   DFLASH_FAULT_INJECT=cross_entropy_wrong   the fused CPU cross-entropy's row losses and gradients come back
//                                             scaled by 9/8
// The variable is read once per process, at the first fused call. Any other non-empty value is an error at
// that call. The reference attention and the generic cross-entropy are never affected.
#pragma once
#include <initializer_list>

#include <ATen/core/Tensor.h>

namespace dflash::ops {

// Applies an attention fault to the fused attention's result tensors (in place), or throws.
void inject_attention_fault(std::initializer_list<at::Tensor> results);
// Applies a cross-entropy fault to the fused cross-entropy's results (in place).
void inject_cross_entropy_fault(std::initializer_list<at::Tensor> results);

}  // namespace dflash::ops
