// The one chooser of a drafter's attention backend on a device, for every caller that runs a drafter (training's
// workers, eval's proposer, bench step): `auto` and `fused` run the fused-vs-reference self-check
// (ops/attention_selfcheck.h) at this drafter's shapes first -- its heads, head_dim, block size and one spec per
// distinct window of its layers -- at the caller's context length and dtype; the choice (Fused or Reference) is
// what the drafter then passes down to the op.
#pragma once
#include <cstdint>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "attention_backend.h"
#include "attention_selfcheck.h"
#include "drafter_config.h"

namespace dflash::drafter {

// How the caller runs the drafter: what the check must cover besides the drafter's own shapes.
struct DrafterAttentionUse {
  int64_t context_len = 256;  // S: training's max_len; at inference a prompt plus the new tokens
  bool packed = false;        // packed rows (training with `pack`)
  bool backward = true;       // training checks the backward too; inference the forward only
  uint64_t seed = 0;
};

std::vector<ops::AttentionCheckSpec> drafter_attention_specs(const DrafterConfig& c, at::Device device,
                                                             at::ScalarType dtype, const DrafterAttentionUse& use);

// ops::choose_attention_backend over drafter_attention_specs: reference without a check; fused when every spec
// passes (else auto falls back to the reference, fused throws).
ops::AttentionChoice choose_drafter_attention(ops::AttentionBackend requested, const DrafterConfig& c,
                                              at::Device device, at::ScalarType dtype, const DrafterAttentionUse& use);

}  // namespace dflash::drafter
