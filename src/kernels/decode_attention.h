// The decode step of continuous batching: each sequence appends one new key/value row to its own cache
// and its one new query token attends over all of that sequence's cached positions (nothing to mask: the
// cache holds only the past). Grouped-query: q head h reads KV head h / (q_heads / kv_heads), and the q
// heads of one KV head are computed together, so each cached row is read once per group. Framework-free.
#pragma once
#include <cstdint>
#include <string>

#include "scalar_types.h"

namespace dflash::kernels {

struct DecodeAttentionArgs {
  ScalarType dtype = ScalarType::Float32;  // Float32 or Float64 (all tensors the same)
  int64_t batch = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  // Element strides; head_dim is contiguous everywhere.
  const void* q = nullptr;  // [batch, q_heads, head_dim]
  int64_t q_sb = 0, q_sh = 0;
  const void* k_new = nullptr;  // [batch, kv_heads, head_dim]: the new rows, written into the caches
  const void* v_new = nullptr;
  int64_t new_sb = 0, new_sh = 0;
  void* const* k_cache = nullptr;  // per sequence: base of its [kv_heads, capacity, head_dim] storage
  void* const* v_cache = nullptr;
  const int64_t* cache_sh = nullptr;   // per sequence: its KV-head stride (capacities may differ)
  int64_t cache_st = 0;                // position stride (the same for every sequence)
  const int64_t* past = nullptr;       // per sequence: rows already cached; the new row goes to past[b]
  void* out = nullptr;                 // [batch, q_heads, head_dim]
  int64_t out_sb = 0, out_sh = 0;
  double scale = 1.0;  // softmax scale, usually 1/sqrt(head_dim)
};

// Empty when the arguments are usable, else what is wrong.
std::string check_decode_attention(const DecodeAttentionArgs& a);

// Sequences [b0, b1): stores their new rows, then writes their outputs. Different ranges may run on
// different threads at once (they touch disjoint caches and outputs).
void decode_attention_cpu(const DecodeAttentionArgs& a, int64_t b0, int64_t b1);

}  // namespace dflash::kernels
