#include "attention_backend.h"

#include "attention_backend_name.h"

namespace dflash::ops {

AttentionBackend parse_attention_backend(const std::string& name, const std::string& where) {
  const std::string n = util::checked_attention_backend(name, where);
  if (n == "fused") return AttentionBackend::Fused;
  if (n == "reference") return AttentionBackend::Reference;
  return AttentionBackend::Auto;
}

const char* attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::Fused: return "fused";
    case AttentionBackend::Reference: return "reference";
    case AttentionBackend::Auto: break;
  }
  return "auto";
}

}  // namespace dflash::ops
