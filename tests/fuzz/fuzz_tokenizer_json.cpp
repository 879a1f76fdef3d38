// tokenizer.json (HF `tokenizers` format): model, vocab, merges, pre-tokenizers, post-processor, added tokens;
// an accepted tokenizer then encodes and decodes a few strings (added tokens, digits, accents, spaces).
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean("fuzz-tokenizer.json", [&] {
    // No tokenizer_config.json exists beside this path.
    const tok::Tokenizer t = tok::Tokenizer::from_tokenizer_json_text(text, "/nonexistent-dflash-fuzz/fuzz-tokenizer.json");
    for (const char* s : {"Hello world", "<|im_start|>user\n12345 caf\xc3\xa9<|im_end|>", "  a  b\t\n", ""}) {
      const auto ids = t.encode(s);
      (void)t.decode(ids);
      (void)t.decode(ids, /*skip_special_tokens=*/true);
    }
  });
  return 0;
}
