#include "sample_format.h"

namespace dflash::data {

std::optional<SampleFormat> sample_format_from_text(const std::string& s) {
  if (s == "auto") return SampleFormat::Auto;
  if (s == "tokens") return SampleFormat::Tokens;
  if (s == "dflash") return SampleFormat::Dflash;
  if (s == "specforge") return SampleFormat::Specforge;
  return std::nullopt;
}

const char* sample_format_name(SampleFormat f) {
  switch (f) {
    case SampleFormat::Tokens: return "tokens";
    case SampleFormat::Dflash: return "dflash";
    case SampleFormat::Specforge: return "specforge";
    case SampleFormat::Auto: break;
  }
  return "auto";
}

}  // namespace dflash::data
