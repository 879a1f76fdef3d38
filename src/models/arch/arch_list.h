// The target architectures, one line each, in TargetArch order. `X(name)` for the architecture whose row
// `name_arch()` is defined in arch/<file>_arch.cpp (usually arch/name_arch.cpp): the enum (target_config.h),
// the row declarations (arch_rows.h) and the table (arch_table.cpp) are all made from this list, so a new
// architecture is its file and its line here.
#pragma once

#define DFLASH_TARGET_ARCHS(X) \
  X(llama)                     \
  X(qwen3)                     \
  X(qwen3_moe)                 \
  X(qwen3_5)                   \
  X(qwen3_5_moe)               \
  X(gpt_oss)
