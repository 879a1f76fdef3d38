// Unicode helpers for the tokenizer: UTF-8 decoding with byte offsets, the character classes the
// pre-tokenizer regexes use (a range table generated from HF tokenizers' own regex engine), and
// GPT-2's byte <-> printable-character mapping of byte-level BPE.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dflash::tok {

enum UnicodeClass : uint32_t {
  kLetter = 1,      // \p{L}
  kNumber = 2,      // \p{N}
  kMark = 4,        // \p{M}
  kWhitespace = 8,  // \s (Oniguruma: U+0009..U+000D, U+0085, Zs, Zl, Zp)
  kNumeric = 16,    // Rust char::is_numeric (HF's Digits pre-tokenizer)
};
uint32_t unicode_classes(uint32_t cp);

// One decoded code point and where its bytes are.
struct CodePoint {
  uint32_t cp;
  uint32_t cls;     // unicode_classes(cp)
  size_t byte_pos;  // offset of its first byte in the text
};
// Decodes UTF-8; an invalid byte becomes one U+FFFD code point of one byte (HF only takes valid text).
std::vector<CodePoint> decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte-level alphabet: every byte maps to one printable code point (space -> U+0120 'Ġ').
uint32_t byte_to_unicode(uint8_t b);
// -1 for a code point outside the alphabet.
int unicode_to_byte(uint32_t cp);
// Each byte of `bytes` as its alphabet character, UTF-8 encoded.
std::string bytes_to_alphabet(std::string_view bytes);

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace dflash::tok
