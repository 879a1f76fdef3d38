// Test-only fault injection into the fused attention, so that the self-check and the fallback of
// attention_backend auto / fused can be tested on a machine whose kernels work. Never on by default:
//   DFLASH_FAULT_INJECT=attention_wrong   the fused op's output and gradients come back scaled by 9/8
//                                         (a kernel computing plausible but wrong numbers)
//   DFLASH_FAULT_INJECT=attention_throw   the fused op throws (a kernel that cannot launch)
// The variable is read once per process, at the first fused attention call. Any other non-empty value is an
// error at that call. The reference attention is never affected.
#pragma once
#include <ATen/core/Tensor.h>

namespace dflash::ops {

enum class AttentionFault { None, Wrong, Throw };

AttentionFault attention_fault();

// Applies the configured fault to the fused op's result tensors (in place), or throws.
void inject_attention_fault(std::initializer_list<at::Tensor> results);

}  // namespace dflash::ops
