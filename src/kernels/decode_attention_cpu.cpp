// Value checks and the choice of instruction set for the CPU decode-attention kernel.
#include <string>

#include "anchor_attention_cpu_isa.h"
#include "cpu_isa.h"
#include "decode_attention.h"

namespace dflash::kernels {

std::string check_decode_attention(const DecodeAttentionArgs& a) {
  if (std::string bad = cpu_isa_switch_error(); !bad.empty()) return bad;
  if (a.dtype != ScalarType::Float32 && a.dtype != ScalarType::Float64)
    return "decode attention: dtype must be float32 or float64";
  if (a.batch < 0 || a.q_heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0)
    return "decode attention: heads and head_dim must be positive";
  if (a.q_heads % a.kv_heads != 0)
    return "decode attention: q_heads (" + std::to_string(a.q_heads) + ") must be a multiple of kv_heads (" +
           std::to_string(a.kv_heads) + ")";
  if (a.q_heads / a.kv_heads > 64) return "decode attention: at most 64 q heads per KV head";
  if (a.batch > 0 && (!a.q || !a.k_new || !a.v_new || !a.k_cache || !a.v_cache || !a.past || !a.cache_sh || !a.out))
    return "decode attention: a pointer is missing";
  for (int64_t b = 0; b < a.batch; ++b) {
    if (!a.k_cache[b] || !a.v_cache[b]) return "decode attention: sequence " + std::to_string(b) + " has no cache";
    if (a.past[b] < 0) return "decode attention: sequence " + std::to_string(b) + " has a negative length";
  }
  return "";
}

void decode_attention_cpu(const DecodeAttentionArgs& a, int64_t b0, int64_t b1) {
  DFLASH_ISA_CALL(decode_attention, a, b0, b1);
}

}  // namespace dflash::kernels
