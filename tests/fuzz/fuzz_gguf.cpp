// GGUF: header, metadata of every type (nested arrays included), tensor infos and data layout; then what the
// loaders read from it: every metadata value, small tensors dequantised, and the tokenizer (tokenizer.ggml.*)
// with a short encode/decode.
#include <cstdint>

#include "fuzz_common.h"
#include "gguf.h"
#include "tokenizer.h"

namespace {

using dflash::io::GGUFValue;

void touch(const GGUFValue& v, int depth) {
  if (!v.is_array()) {
    (void)v.u(), (void)v.f(), (void)v.s().size();
    return;
  }
  const uint64_t n = v.size();
  for (uint64_t k = 0; k < n && k < 64; ++k) touch(v.item(k), depth + 1);
  if (n > 64) touch(v.item(n - 1), depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  fuzz::expect_clean("fuzz.gguf", [&] {
    const io::GGUFFile f = io::GGUFFile::from_bytes("fuzz.gguf", data, size);
    for (const auto& [k, v] : f.metadata()) {
      touch(v, 0);
      const std::string key(k);
      fuzz::expect_clean("fuzz.gguf", [&] { f.get_int(key, 1, 2147483647); });
      fuzz::expect_clean("fuzz.gguf", [&] { f.get_string_array(key); });
      fuzz::expect_clean("fuzz.gguf", [&] { f.get_int_array(key); });
      fuzz::expect_clean("fuzz.gguf", [&] { f.get_float_array(key); });
    }
    for (const auto& t : f.tensors()) {
      const auto* ti = io::ggml_type_info(static_cast<uint32_t>(t.type));
      if (ti->dequantizable && t.nbytes <= (1u << 20) && t.numel() <= (1u << 20)) (void)f.dequantize(t);
    }
    if (f.has("tokenizer.ggml.model")) {
      const tok::Tokenizer t = tok::Tokenizer::from_gguf(f);
      const auto ids = t.encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 \xe2\x9c\x93  x");
      (void)t.decode(ids);
      (void)t.decode(ids, /*skip_special_tokens=*/true);
    }
  });
  return 0;
}
