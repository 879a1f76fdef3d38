// Pre-tokenization: the text is cut into pieces before BPE, exactly as HF `tokenizers` does it.
// The split regexes are matched by hand (no std::regex: it is slow and has no \p{L}/\p{N}); each
// matcher follows the regex's alternation order and backtracking, so the pieces are the ones
// Oniguruma finds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "unicode.h"

namespace dflash::tok {

// The split regexes we know.
enum class SplitRegex {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+   (GPT-2, ByteLevel)
  GPT2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  LLAMA3,
  // Qwen2: as LLAMA3 with \p{N} (single digits) instead of \p{N}{1,3}.
  QWEN2,
};
// The regex source text HF tokenizer.json files carry for each (used to recognise a Split step).
const char* split_regex_source(SplitRegex r);

struct PreTokenizerStep {
  enum Kind { kSplit, kDigits, kPrefixSpace } kind;
  SplitRegex regex = SplitRegex::GPT2;  // kSplit
  bool individual_digits = false;       // kDigits
};

// A piece of the text: code points [begin, end) of the decoded text, plus a space in front that
// ByteLevel(add_prefix_space) inserted (it covers no bytes of the input).
struct Piece {
  size_t begin, end;
  bool prefix_space = false;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  // Splits code points [begin, end) of `cps` through every step in order.
  std::vector<Piece> split(const std::vector<CodePoint>& cps, size_t begin, size_t end) const;
  const std::vector<PreTokenizerStep>& steps() const { return steps_; }
  std::string describe() const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace dflash::tok
