#include "pretokenizer.h"

#include <stdexcept>

namespace dflash::tok {

namespace {

// The code points one step works on: a piece's, with the inserted prefix space first when present.
struct Seq {
  std::vector<uint32_t> cp, cls;
  size_t size() const { return cp.size(); }
  bool letter(size_t k) const { return cls[k] & kLetter; }
  bool number(size_t k) const { return cls[k] & kNumber; }
  bool space(size_t k) const { return cls[k] & kWhitespace; }
  bool other(size_t k) const { return !(cls[k] & (kLetter | kNumber | kWhitespace)); }
  bool crlf(size_t k) const { return cp[k] == '\r' || cp[k] == '\n'; }
  size_t run(size_t k, bool (Seq::*pred)(size_t) const) const {
    while (k < size() && (this->*pred)(k)) ++k;
    return k;
  }
};

// 's 't 're 've 'm 'll 'd at i; returns the end or i. `fold` makes it case-insensitive, as (?i:...),
// where Oniguruma also folds U+017F (long s) to s.
size_t contraction(const Seq& s, size_t i, bool fold) {
  if (s.cp[i] != '\'' || i + 1 >= s.size()) return i;
  auto low = [&](size_t k) -> uint32_t {
    uint32_t c = s.cp[k];
    if (!fold) return c;
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';
    return c;
  };
  uint32_t a = low(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < s.size()) {
    uint32_t b = low(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return i;
}

// \s+(?!\S) then \s+, at a whitespace i: the run, less its last char when a non-space follows.
size_t whitespace_tail(const Seq& s, size_t i) {
  size_t j = s.run(i, &Seq::space);
  if (j == s.size()) return j;
  return j - 1 > i ? j - 1 : j;
}

size_t match_gpt2(const Seq& s, size_t i) {
  size_t n = s.size();
  if (size_t e = contraction(s, i, false); e != i) return e;
  bool sp = s.cp[i] == ' ' && i + 1 < n;
  if (sp && s.letter(i + 1)) return s.run(i + 1, &Seq::letter);
  if (s.letter(i)) return s.run(i, &Seq::letter);
  if (sp && s.number(i + 1)) return s.run(i + 1, &Seq::number);
  if (s.number(i)) return s.run(i, &Seq::number);
  if (sp && s.other(i + 1)) return s.run(i + 1, &Seq::other);
  if (s.other(i)) return s.run(i, &Seq::other);
  return whitespace_tail(s, i);
}

size_t match_llama3(const Seq& s, size_t i, size_t max_digits) {
  size_t n = s.size();
  if (size_t e = contraction(s, i, true); e != i) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!s.crlf(i) && !s.letter(i) && !s.number(i) && i + 1 < n && s.letter(i + 1)) return s.run(i + 1, &Seq::letter);
  if (s.letter(i)) return s.run(i, &Seq::letter);
  // \p{N}{1,3}
  if (s.number(i)) {
    size_t e = i;
    while (e < n && e - i < max_digits && s.number(e)) ++e;
    return e;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t k = (s.cp[i] == ' ' && i + 1 < n && s.other(i + 1)) ? i + 1 : i;
  if (s.other(k)) {
    size_t e = s.run(k, &Seq::other);
    while (e < n && s.crlf(e)) ++e;
    return e;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n.
  size_t j = s.run(i, &Seq::space);
  for (size_t p = j; p > i; --p)
    if (s.crlf(p - 1)) return p;
  return whitespace_tail(s, i);
}

size_t match(SplitRegex r, const Seq& s, size_t i) {
  switch (r) {
    case SplitRegex::GPT2: return match_gpt2(s, i);
    case SplitRegex::LLAMA3: return match_llama3(s, i, 3);
    case SplitRegex::QWEN2: return match_llama3(s, i, 1);
  }
  return i;
}

}  // namespace

const char* split_regex_source(SplitRegex r) {
  switch (r) {
    case SplitRegex::GPT2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitRegex::LLAMA3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitRegex::QWEN2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return "";
}

std::string PreTokenizer::describe() const {
  std::string d;
  for (const auto& st : steps_) {
    if (!d.empty()) d += " + ";
    if (st.kind == PreTokenizerStep::kSplit)
      d += st.regex == SplitRegex::GPT2 ? "split(gpt2)" : st.regex == SplitRegex::LLAMA3 ? "split(llama3)" : "split(qwen2)";
    else if (st.kind == PreTokenizerStep::kDigits)
      d += st.individual_digits ? "digits(individual)" : "digits";
    else
      d += "prefix-space";
  }
  return d.empty() ? "none" : d;
}

std::vector<Piece> PreTokenizer::split(const std::vector<CodePoint>& cps, size_t begin, size_t end) const {
  std::vector<Piece> pieces{{begin, end, false}};
  Seq s;
  for (const auto& st : steps_) {
    std::vector<Piece> next;
    next.reserve(pieces.size() * 2);
    for (const Piece& p : pieces) {
      if (st.kind == PreTokenizerStep::kPrefixSpace) {
        bool starts_with_space = p.prefix_space || (p.begin < p.end && cps[p.begin].cp == ' ');
        next.push_back({p.begin, p.end, starts_with_space ? p.prefix_space : true});
        continue;
      }
      // Local view; index 0 is the inserted space when the piece has one.
      size_t off = p.prefix_space ? 1 : 0;
      s.cp.clear();
      s.cls.clear();
      if (p.prefix_space) {
        s.cp.push_back(' ');
        s.cls.push_back(kWhitespace);
      }
      for (size_t k = p.begin; k < p.end; ++k) {
        s.cp.push_back(cps[k].cp);
        s.cls.push_back(cps[k].cls);
      }
      auto emit = [&](size_t a, size_t b) {
        bool pre = p.prefix_space && a == 0;
        size_t ga = a < off ? p.begin : p.begin + a - off;
        size_t gb = b < off ? p.begin : p.begin + b - off;
        next.push_back({ga, gb, pre});
      };
      size_t n = s.size();
      if (st.kind == PreTokenizerStep::kDigits) {
        size_t i = 0;
        while (i < n) {
          bool num = s.cls[i] & kNumeric;
          size_t e = i + 1;
          if (!num || !st.individual_digits)
            while (e < n && static_cast<bool>(s.cls[e] & kNumeric) == num) ++e;
          emit(i, e);
          i = e;
        }
        continue;
      }
      for (size_t i = 0; i < n;) {
        size_t e = match(st.regex, s, i);
        if (e <= i) throw std::logic_error("pre-tokenizer: empty match");  // every char matches some branch
        emit(i, e);
        i = e;
      }
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace dflash::tok
