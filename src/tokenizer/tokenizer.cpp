#include "tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "input_file.h"
#include "normalizer_nfc.h"
#include "unicode.h"

namespace dflash::tok {

namespace {

struct Span {
  size_t begin, end;  // code point indices
  int32_t added = -1;  // index into the added tokens, or -1 for plain text
};

// Leftmost-longest matching of added tokens over the plain spans (as HF's Aho-Corasick pass), with
// lstrip/rstrip swallowing whitespace next to a match. Works on code point indices.
std::vector<Span> match_added(const std::vector<CodePoint>& cps, std::string_view text, const std::vector<Span>& in,
                              const std::vector<AddedToken>& added, bool normalized_pass) {
  std::vector<int32_t> cand;  // longest first
  for (size_t k = 0; k < added.size(); ++k)
    if (added[k].normalized == normalized_pass && !added[k].content.empty()) cand.push_back(static_cast<int32_t>(k));
  if (cand.empty()) return in;
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int32_t a, int32_t b) { return added[a].content.size() > added[b].content.size(); });
  auto byte_at = [&](size_t cp_index) { return cp_index < cps.size() ? cps[cp_index].byte_pos : text.size(); };
  std::vector<Span> out;
  for (const Span& s : in) {
    if (s.added >= 0) {
      out.push_back(s);
      continue;
    }
    size_t start = s.begin;  // first code point not yet emitted
    size_t i = s.begin;
    while (i < s.end) {
      size_t pos = cps[i].byte_pos, limit = byte_at(s.end);
      int32_t hit = -1;
      for (int32_t k : cand) {
        const std::string& c = added[k].content;
        if (c.size() <= limit - pos && text.compare(pos, c.size(), c) == 0) {
          hit = k;
          break;
        }
      }
      if (hit < 0) {
        ++i;
        continue;
      }
      size_t stop = i;
      while (stop < s.end && cps[stop].byte_pos < pos + added[hit].content.size()) ++stop;
      size_t mb = i, me = stop;
      if (added[hit].lstrip)
        while (mb > start && (cps[mb - 1].cls & kWhitespace)) --mb;
      if (added[hit].rstrip)
        while (me < s.end && (cps[me].cls & kWhitespace)) ++me;
      if (start < mb) out.push_back({start, mb, -1});
      out.push_back({mb, me, hit});
      // HF resumes matching after the token itself; a match inside the swallowed whitespace is
      // impossible for tokens that do not start with whitespace.
      start = me;
      i = std::max(stop, me);
    }
    if (start < s.end) out.push_back({start, s.end, -1});
  }
  return out;
}

}  // namespace

void Tokenizer::finish() {
  size_t n = bpe_.size();
  for (const auto& a : added_) n = std::max(n, static_cast<size_t>(a.id) + 1);
  added_index_.assign(n, -1);
  for (size_t k = 0; k < added_.size(); ++k) added_index_[added_[k].id] = static_cast<int32_t>(k);
}

size_t Tokenizer::vocab_size() const { return added_index_.size(); }

int32_t Tokenizer::token_to_id(const std::string& token) const {
  for (const auto& a : added_)
    if (a.content == token) return a.id;
  return bpe_.id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= added_index_.size())
    throw std::out_of_range(source_ + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(added_index_.size()) + ")");
  if (added_index_[id] >= 0) return added_[added_index_[id]].content;
  return bpe_.token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < added_index_.size() && added_index_[id] >= 0 &&
         added_[added_index_[id]].special;
}

void Tokenizer::encode_plain(const std::vector<CodePoint>& cps, std::string_view text, size_t begin, size_t end,
                             Encoding& out) const {
  std::vector<uint32_t> lens;
  std::string bytes;
  for (const Piece& p : pre_.split(cps, begin, end)) {
    size_t b0 = p.begin < cps.size() ? cps[p.begin].byte_pos : text.size();
    size_t b1 = p.end < cps.size() ? cps[p.end].byte_pos : text.size();
    bytes.assign(p.prefix_space ? " " : "");
    bytes.append(text.substr(b0, b1 - b0));
    size_t first = out.ids.size();
    lens.clear();
    bpe_.encode_word(bytes, out.ids, lens);
    // Token byte ranges in the input; the inserted space maps to an empty range at the piece start.
    size_t at = 0;
    for (size_t k = first; k < out.ids.size(); ++k) {
      size_t len = lens[k - first];
      size_t lo = at, hi = at + len;
      if (p.prefix_space) {
        lo = lo == 0 ? 0 : lo - 1;
        hi = hi - 1;
      }
      out.offsets.emplace_back(b0 + lo, b0 + hi);
      at += len;
    }
  }
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  std::vector<CodePoint> cps = decode_utf8(text);
  auto byte_at = [&](size_t k) { return k < cps.size() ? cps[k].byte_pos : text.size(); };
  Encoding out;
  if (add_special_tokens)
    for (int32_t id : prefix_ids_) {
      out.ids.push_back(id);
      out.offsets.emplace_back(0, 0);
    }
  // Added tokens that skip normalization are matched on the raw text first (as HF does); the rest
  // is normalized, then split on the normalized added tokens, then pre-tokenized and BPE-encoded.
  for (const Span& s : match_added(cps, text, {{0, cps.size(), -1}}, added_, false)) {
    size_t b0 = byte_at(s.begin), b1 = byte_at(s.end);
    if (s.added >= 0) {
      out.ids.push_back(added_[s.added].id);
      out.offsets.emplace_back(b0, b1);
      continue;
    }
    if (s.begin == s.end) continue;
    if (nfc_) {
      std::string norm = nfc(text.substr(b0, b1 - b0));
      if (norm != text.substr(b0, b1 - b0)) {
        // Changed by normalization: encode the normalized text; its tokens all point at the span.
        std::vector<CodePoint> ncps = decode_utf8(norm);
        Encoding part;
        for (const Span& t : match_added(ncps, norm, {{0, ncps.size(), -1}}, added_, true)) {
          if (t.added >= 0) part.ids.push_back(added_[t.added].id);
          else if (t.begin < t.end) encode_plain(ncps, norm, t.begin, t.end, part);
        }
        for (int32_t id : part.ids) {
          out.ids.push_back(id);
          out.offsets.emplace_back(b0, b1);
        }
        continue;
      }
    }
    for (const Span& t : match_added(cps, text, {s}, added_, true)) {
      if (t.added >= 0) {
        out.ids.push_back(added_[t.added].id);
        out.offsets.emplace_back(byte_at(t.begin), byte_at(t.end));
      } else if (t.begin < t.end) {
        encode_plain(cps, text, t.begin, t.end, out);
      }
    }
  }
  if (add_special_tokens)
    for (int32_t id : suffix_ids_) {
      out.ids.push_back(id);
      out.offsets.emplace_back(text.size(), text.size());
    }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    std::string tok = id_to_token(id);
    // Byte-level decoding of the token; one with a character outside the alphabet stays as it is.
    std::string mapped;
    bool ok = true;
    for (const CodePoint& c : decode_utf8(tok)) {
      int b = unicode_to_byte(c.cp);
      if (b < 0) {
        ok = false;
        break;
      }
      mapped += static_cast<char>(b);
    }
    bytes += ok ? mapped : tok;
  }
  return utf8_lossy(bytes);
}

Tokenizer Tokenizer::load(const std::string& path) {
  char magic[4] = {0, 0, 0, 0};
  {
    io::InputFile f(path);  // a FIFO or a folder is refused here, before any read could block
    if (::pread(f.fd(), magic, 4, 0) == 4 && std::string(magic, 4) == "GGUF") return from_gguf(path);
  }
  return from_tokenizer_json(path);
}

}  // namespace dflash::tok
