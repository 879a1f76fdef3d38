#include "attention_backend.h"

#include <stdexcept>

namespace dflash::ops {

std::optional<AttentionBackend> attention_backend_from_text(const std::string& name) {
  if (name == "auto") return AttentionBackend::Auto;
  if (name == "fused") return AttentionBackend::Fused;
  if (name == "reference") return AttentionBackend::Reference;
  return std::nullopt;
}

AttentionBackend parse_attention_backend(const std::string& name, const std::string& where) {
  if (const auto b = attention_backend_from_text(name)) return *b;
  throw std::invalid_argument(where + ": expected " + kAttentionBackendSpellings + ", got '" + name + "'");
}

const char* attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::Fused: return "fused";
    case AttentionBackend::Reference: return "reference";
    case AttentionBackend::Auto: break;
  }
  return "auto";
}

int64_t attention_backend_code(AttentionBackend b) { return static_cast<int64_t>(b); }

AttentionBackend attention_backend_of_code(int64_t code) {
  if (code < 0 || code > static_cast<int64_t>(AttentionBackend::Reference))
    throw std::logic_error("attention backend: no backend has code " + std::to_string(code));
  return static_cast<AttentionBackend>(code);
}

}  // namespace dflash::ops
