// Which implementation runs the anchor-block attention (one spelling everywhere: util/attention_backend_name.h).
//   fused      the fused kernels (src/kernels: CPU per instruction set, CUDA), the fast path
//   reference  anchor_attention_reference.h: LibTorch ops only, on any device and dtype, for when the fused
//              kernels cannot run or cannot be trusted on a device
//   auto       fused after it passed the self-check against the reference on this device (attention_selfcheck.h),
//              else the reference
#pragma once
#include <string>

namespace dflash::ops {

enum class AttentionBackend { Auto, Fused, Reference };

// "auto" | "fused" | "reference"; anything else is an std::invalid_argument naming `where`.
AttentionBackend parse_attention_backend(const std::string& name, const std::string& where);
const char* attention_backend_name(AttentionBackend b);

}  // namespace dflash::ops
