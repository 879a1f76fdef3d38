// gpt-oss attention in plain ATen ops: softmax attention whose denominator also holds one learned logit per head
// (the "sink", which takes probability mass but adds no value), optionally over a sliding window of keys, computed
// as transformers' eager implementation does (scores, sink column, max subtracted, softmax, sink column dropped).
// Queries go in chunks so that the [chunk, keys] scores stay bounded on long prompts.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kv_cache.h"

namespace dflash::models {

// q [B, Hq, T, D]; k, v [B, Hkv, past + T, D] (every position so far; Hkv divides Hq); sinks [Hq].
// Query t, at position past + t, sees key j when j <= past + t and, for window > 0, j > past + t - window.
// Returns [B, Hq, T, D] in v's dtype.
at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          int64_t past, int64_t window);

// decode_batch's attention for a sink layer: sequence b stores its new K/V row in caches[b] (layer `layer`) and
// its one query attends over that cache. q [B, Hq, 1, D], k/v [B, Hkv, 1, D] -> [B, Hq, 1, D].
at::Tensor sink_decode_attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<KVCache*>& caches, const at::Tensor& sinks, int64_t window);

}  // namespace dflash::models
