#include "bpe.h"

#include <algorithm>
#include <queue>
#include <stdexcept>

#include "unicode.h"

namespace dflash::tok {

BPE::BPE(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges, const std::string& source)
    : id_to_token_(std::move(vocab)), ignore_merges_(ignore_merges) {
  token_to_id_.reserve(id_to_token_.size());
  for (size_t i = 0; i < id_to_token_.size(); ++i) token_to_id_.emplace(id_to_token_[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, byte_to_unicode(static_cast<uint8_t>(b)));
    byte_id_[b] = id(ch);
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    int32_t ia = id(a), ib = id(b), inew = id(a + b);
    const std::string* missing = ia < 0 ? &a : ib < 0 ? &b : nullptr;
    std::string joined = a + b;
    if (!missing && inew < 0) missing = &joined;
    if (missing)
      throw std::runtime_error(source + ": merge " + std::to_string(r) + " ('" + a + "' '" + b + "'): token '" +
                               *missing + "' is not in the vocabulary");
    // A repeated pair keeps its last rank, as HF's map construction does.
    merges_[key(ia, ib)] = {static_cast<int32_t>(r), inew};
  }
}

void BPE::encode_word(std::string_view bytes, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    auto it = token_to_id_.find(bytes_to_alphabet(bytes));
    if (it != token_to_id_.end()) {
      ids.push_back(it->second);
      lens.push_back(static_cast<uint32_t>(bytes.size()));
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  std::vector<Sym> syms;
  syms.reserve(bytes.size());
  for (unsigned char b : bytes) {
    // A byte without a vocabulary entry is dropped, as HF's BPE does when it has no unk token.
    if (byte_id_[b] < 0) continue;
    int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back({byte_id_[b], k - 1, k + 1, 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  // Candidate merges ordered by (rank, position); stale entries are skipped when popped.
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) push(k);
  while (!queue.empty()) {
    Cand c = queue.top();
    queue.pop();
    Sym& left = syms[c.pos];
    if (left.len == 0 || left.next < 0) continue;
    Sym& right = syms[left.next];
    auto it = merges_.find(key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;
    left.id = c.new_id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = syms[k].next) {
    ids.push_back(syms[k].id);
    lens.push_back(syms[k].len);
  }
}

std::vector<std::pair<int32_t, int32_t>> BPE::merges_by_rank() const {
  // Ranks are the merges' source positions (a repeated pair kept its last), so they may have gaps: sort, not index.
  std::vector<std::pair<int32_t, uint64_t>> ranked;
  ranked.reserve(merges_.size());
  for (const auto& [k, m] : merges_) ranked.emplace_back(m.rank, k);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(ranked.size());
  for (const auto& [rank, k] : ranked)
    out.emplace_back(static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xffffffffu));
  return out;
}

}  // namespace dflash::tok
