// Unicode NFC (canonical decomposition, canonical ordering, canonical composition), for tokenizers
// whose tokenizer.json has an NFC normalizer (Qwen2/Qwen3). Tables from gen_unicode_nfc.py.
#pragma once
#include <string>
#include <string_view>

namespace dflash::tok {

// NFC of valid UTF-8 text (an invalid byte passes through as U+FFFD, as decode_utf8 reads it).
std::string nfc(std::string_view text);

}  // namespace dflash::tok
