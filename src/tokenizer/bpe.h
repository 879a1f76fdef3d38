// Byte-level BPE model as HF `tokenizers` runs it: a word (a pre-tokenized piece, as bytes) starts as
// one symbol per byte-alphabet character and the adjacent pair of lowest merge rank is merged first
// (leftmost on ties) until no pair has a merge.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dflash::tok {

class BPE {
 public:
  BPE() = default;
  // `vocab[id]` is the token string in the byte alphabet; merges are pairs of token strings, best
  // first. Throws (naming `source`) when a merge names a token not in the vocabulary.
  BPE(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges, const std::string& source);

  // Appends the ids of one word, given as raw bytes, and the byte length each token covers.
  void encode_word(std::string_view bytes, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;

  size_t size() const { return id_to_token_.size(); }
  const std::string& token(int32_t id) const { return id_to_token_.at(static_cast<size_t>(id)); }
  int32_t id(const std::string& token) const {
    auto it = token_to_id_.find(token);
    return it == token_to_id_.end() ? -1 : it->second;
  }
  // The merges as (left id, right id), best first: what a tokenizer.json writer lists.
  std::vector<std::pair<int32_t, int32_t>> merges_by_rank() const;
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256];  // the id of each byte's alphabet character, -1 when the vocab lacks it
  bool ignore_merges_ = false;
};

}  // namespace dflash::tok
