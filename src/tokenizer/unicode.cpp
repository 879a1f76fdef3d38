#include "unicode.h"

#include <algorithm>
#include <array>

namespace dflash::tok {

namespace {

struct ClassRange {
  uint32_t first, last, classes;
};
constexpr ClassRange kClassRanges[] = {
#include "unicode_classes_table.inc"
};

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // the alphabet lies below U+0144
  ByteAlphabet() {
    to_byte.fill(-1);
    // Printable bytes map to themselves; the rest take code points 256, 257, ... in byte order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid; decodes into cp.
size_t utf8_seq(const unsigned char* p, size_t n, uint32_t& cp) {
  unsigned char c = p[0];
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len;
  uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (k >= n) return 0;
    unsigned char b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  return len;
}

// Length of the maximal prefix of a (truncated or broken) sequence at p that could start valid UTF-8:
// what one U+FFFD replaces.
size_t utf8_invalid_prefix(const unsigned char* p, size_t n) {
  unsigned char c = p[0];
  size_t len;
  uint32_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < len && k < n; ++k) {
    unsigned char b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  return k;
}

}  // namespace

uint32_t unicode_classes(uint32_t cp) {
  const auto* end = kClassRanges + sizeof(kClassRanges) / sizeof(kClassRanges[0]);
  const auto* it = std::upper_bound(kClassRanges, end, cp, [](uint32_t v, const ClassRange& r) { return v < r.first; });
  if (it == kClassRanges) return 0;
  --it;
  return cp <= it->last ? it->classes : 0;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  static const auto ascii = [] {
    std::array<uint32_t, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = unicode_classes(c);
    return t;
  }();
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, n = text.size();
  while (i < n) {
    uint32_t cp;
    size_t len = utf8_seq(p + i, n - i, cp);
    if (len == 0) {
      cp = 0xFFFD;
      len = 1;
    }
    out.push_back({cp, cp < 0x80 ? ascii[cp] : unicode_classes(cp), i});
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t byte_to_unicode(uint8_t b) { return alphabet().to_cp[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 324 ? alphabet().to_byte[cp] : -1; }

std::string bytes_to_alphabet(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_unicode(b));
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    uint32_t cp;
    size_t len = utf8_seq(p + i, n - i, cp);
    if (len) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += utf8_invalid_prefix(p + i, n - i);
    }
  }
  return out;
}

}  // namespace dflash::tok
