// Which implementation runs the anchor-block attention, one spelling for every command, settings file and the
// Python package: auto | fused | reference. Torch-free (the settings parsers and the fuzz targets read it).
//   fused      the fused kernels (src/kernels: CPU per instruction set, CUDA), the fast path
//   reference  anchor_attention_reference.h: LibTorch ops only, on any device and dtype, for when the fused
//              kernels cannot run or cannot be trusted on a device
//   auto       fused after it passed the self-check against the reference on this device (attention_selfcheck.h),
//              else the reference
// A drafter resolves auto once per device before it runs (drafter/drafter_attention.h) and passes Fused or
// Reference down to the op.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::ops {

enum class AttentionBackend { Auto, Fused, Reference };

std::optional<AttentionBackend> attention_backend_from_text(const std::string& name);
inline constexpr const char* kAttentionBackendSpellings = "auto, fused or reference";
// The same, throwing "<where>: expected auto, fused or reference, got '<name>'".
AttentionBackend parse_attention_backend(const std::string& name, const std::string& where);
const char* attention_backend_name(AttentionBackend b);

// An autograd node keeps its settings as IValues, which hold no enum: the backend travels as this code, and comes
// back through attention_backend_of_code, which refuses a code that is no backend.
int64_t attention_backend_code(AttentionBackend b);
AttentionBackend attention_backend_of_code(int64_t code);

}  // namespace dflash::ops
