// Which reader opens training samples (docs/TRAINING.md "Data formats"): auto (by the name and, for
// safetensors, the metadata) | tokens (online: the trainer runs the target) | dflash (dflash-hidden-v1 features)
// | specforge (torch.save dumps). Torch-free, so the torch-free settings parser reads it.
#pragma once
#include <optional>
#include <string>

namespace dflash::data {

enum class SampleFormat { Auto, Tokens, Dflash, Specforge };

std::optional<SampleFormat> sample_format_from_text(const std::string& s);
const char* sample_format_name(SampleFormat f);
inline constexpr const char* kSampleFormatSpellings = "auto, tokens, dflash or specforge";

}  // namespace dflash::data
