// The drafter config `dflash train` builds when the user gives none, and `dflash plan --target-config` plans:
// derived from the target's config.json.
// This is the one rule for every caller: `dflash train`, `plan --target-config`, and every preset of `plan` and
// `bench step` (plan/drafter_presets.h), so one target name plans and trains one drafter.
// - Llama / dense Qwen3 targets: the target's own attention layout (heads, KV heads, head_dim), its MLP width,
//   all layers full attention.
// - Qwen3.5 / Qwen3.6 hybrids: the layout of the released DFlash drafters for these targets (z-lab
//   Qwen3.5-9B/27B-DFlash, Qwen3.6-27B-DFlash: 32 query heads x head_dim 128, 8 KV heads, the target's hidden
//   and MLP width, rope_theta of the target) when the target is that large (hidden >= 4096); smaller hybrids
//   keep their own full-attention layout. Layer types follow the newer Qwen3.6 drafter: every layer but the last
//   slides over a 2048-token window. The mask token defaults to 248070 (the released drafters' choice) when the
//   target has the Qwen3.5 vocabulary (248320 entries).
// Every drafter takes the target's RoPE (theta and scaling; a GGUF target's rope_freqs divisors have no config.json
// spelling, so such a drafter config fails validation and asks for a drafter_config).
// Target layer ids default to docs/DFLASH.md's rule (for 64 target layers and 5 drafter layers: 1, 16, 31, 46, 61 as
// in the released Qwen3.6-27B drafter).
#pragma once
#include <cstdint>
#include <vector>

#include "drafter_config.h"
#include "target_config.h"

namespace dflash::drafter {

// mask_token_id < 0: the default above where there is one (else stays -1: the caller must ask for it).
// target_layer_ids empty: the default for (target layers, drafter layers), docs/DFLASH.md. Not validated here.
DrafterConfig drafter_config_for_target(const models::TargetConfig& target, int64_t drafter_layers, int64_t block_size,
                                        int64_t mask_token_id, const std::vector<int64_t>& target_layer_ids);

}  // namespace dflash::drafter
