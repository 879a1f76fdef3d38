// The attention of TargetModel::decode_batch: every sequence stores its new K/V row in its own cache at
// position length() and its one query token attends over that cache. On CPU in float32/float64 this is
// one kernel call for all sequences (src/ops/decode_attention_op.h) instead of a cache copy and an SDPA
// per sequence, whose fixed per-call costs dominated the step; elsewhere it is the per-sequence path.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>

#include "kv_cache.h"

namespace dflash::models {

// q [B, Hq, 1, D], k/v [B, Hkv, 1, D] -> [B, Hq, 1, D]. Caches are advanced by the caller. use_kernel =
// false forces the per-sequence path (the benchmark's reference).
at::Tensor batched_decode_attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const std::vector<KVCache*>& caches, bool use_kernel = true);

}  // namespace dflash::models
