// Entry points of the CPU kernels (anchor attention, decode attention, cross-entropy rows, DSpark objective
// rows), compiled once per instruction set (see anchor_attention_cpu_isa.cpp.in).
#pragma once
#include <cstdint>

#include "anchor_attention.h"
#include "cross_entropy_rows.h"
#include "decode_attention.h"
#include "dspark_objective_rows.h"

namespace dflash::kernels {


#define DFLASH_DECLARE_CPU_ISA(ns)                                                                  \
  namespace ns {                                                                                    \
  int64_t scratch_bytes_forward(const AnchorAttentionShape& s);                                     \
  int64_t scratch_bytes_backward(const AnchorAttentionShape& s);                                    \
  void forward(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p, int64_t first,           \
               int64_t step, unsigned char* scratch);                                               \
  void delta(const AnchorAttentionArgs& a, void* delta, int64_t row0, int64_t row1);                \
  void backward(const AnchorAttentionArgs& a, const AnchorAttentionPlan& p, const void* delta,      \
                int64_t partition, void* dq, unsigned char* scratch);                               \
  void reduce_dq(const AnchorAttentionArgs& a, int64_t partitions, const void* parts, int64_t row0,  \
                 int64_t row1);                                                                     \
  void decode_attention(const DecodeAttentionArgs& a, int64_t b0, int64_t b1);                      \
  void cross_entropy_rows(const CrossEntropyRowsArgs& a, int64_t r0, int64_t r1);                   \
  void dspark_rows(const DSparkRowsArgs& a, int64_t r0, int64_t r1);                                \
  float softmax_exp_row(float* s, int64_t n, float scale, float offset);                            \
  }

DFLASH_DECLARE_CPU_ISA(cpu_avx512)
DFLASH_DECLARE_CPU_ISA(cpu_avx2)
DFLASH_DECLARE_CPU_ISA(cpu_base)

}  // namespace dflash::kernels
