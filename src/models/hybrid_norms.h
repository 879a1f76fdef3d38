// The RMSNorms of the Qwen3.5 / Qwen3.6 hybrids, computed the way transformers does for each dtype: statistics
// in float32 for 16/32-bit inputs (float64 for float64 ones), the scale applied before the cast back.
#pragma once
#include <ATen/core/Tensor.h>

namespace dflash::models {

// Stored weights are zero-centred (the norm scales by 1 + w, initialised to 0): the effective scale 1 + w in
// gdn::state_dtype(dtype), from a weight tensor held in `dtype` (as transformers holds it).
at::Tensor zero_centred_scale(const at::Tensor& w, at::ScalarType dtype);

// x * rsqrt(mean(x^2) + eps) * scale over the last dim; `scale` from zero_centred_scale. Returns x's dtype.
at::Tensor hybrid_rms_norm(const at::Tensor& x, const at::Tensor& scale, double eps);

// Gated DeltaNet output norm (weights not zero-centred): normalise x, cast to x's dtype, scale by w (same
// dtype), multiply by silu(gate) in the statistics dtype, cast back. x, gate [..., D], w [D].
at::Tensor gated_rms_norm(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& w, double eps);

}  // namespace dflash::models
