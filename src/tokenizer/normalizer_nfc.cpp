#include "normalizer_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "unicode.h"

namespace dflash::tok {

namespace {

struct Ccc {
  uint32_t cp, ccc;
};
constexpr Ccc kCcc[] = {
#define DFLASH_NFC_CCC
#include "unicode_nfc_table.inc"
#undef DFLASH_NFC_CCC
};
struct Decomp {
  uint32_t cp;
  uint32_t seq[4];  // zero-terminated when shorter
};
constexpr Decomp kDecomp[] = {
#define DFLASH_NFC_DECOMP
#include "unicode_nfc_table.inc"
#undef DFLASH_NFC_DECOMP
};
struct Compose {
  uint32_t first, second, composite;
};
constexpr Compose kCompose[] = {
#define DFLASH_NFC_COMPOSE
#include "unicode_nfc_table.inc"
#undef DFLASH_NFC_COMPOSE
};

// Hangul syllables are composed and decomposed arithmetically.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint32_t ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCcc);
  const auto* it = std::lower_bound(std::begin(kCcc), end, cp, [](const Ccc& e, uint32_t v) { return e.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto* end = std::end(kDecomp);
    const auto* it = std::lower_bound(std::begin(kDecomp), end, cp, [](const Decomp& e, uint32_t v) { return e.cp < v; });
    if (it != end && it->cp == cp) {
      for (uint32_t c : it->seq)
        if (c) out.push_back(c);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = std::end(kCompose);
  const auto* it = std::lower_bound(std::begin(kCompose), end, std::make_pair(a, b), [](const Compose& e, const std::pair<uint32_t, uint32_t>& v) {
    return e.first != v.first ? e.first < v.first : e.second < v.second;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Fast path: ASCII and text below U+0300 with no decomposable characters is already NFC.
  bool simple = true;
  for (unsigned char c : text)
    if (c >= 0xC3) {  // lead bytes of U+00C0 and above
      simple = false;
      break;
    }
  if (simple) return std::string(text);

  std::vector<uint32_t> d;
  d.reserve(text.size());
  for (const CodePoint& c : decode_utf8(text)) decompose(c.cp, d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // Canonical composition: a character joins the last starter unless something between blocks it.
  std::vector<uint32_t> out;
  out.reserve(d.size());
  long starter = -1;
  uint32_t last_class = 0;
  for (uint32_t ch : d) {
    uint32_t cc = ccc(ch);
    if (starter >= 0 && (last_class == 0 || last_class < cc)) {
      if (uint32_t comp = compose(out[starter], ch)) {
        out[starter] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<long>(out.size());
      last_class = 0;
    } else {
      last_class = cc;
    }
    out.push_back(ch);
  }
  std::string s;
  s.reserve(text.size());
  for (uint32_t cp : out) append_utf8(s, cp);
  return s;
}

}  // namespace dflash::tok
