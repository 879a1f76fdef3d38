// A byte-level BPE tokenizer that gives the ids HF `tokenizers` gives: added (special) tokens are
// matched first, the rest is pre-tokenized (pretokenizer.h), byte-mapped and BPE-encoded (bpe.h).
// Loads from a GGUF file's tokenizer.ggml.* metadata or from an HF tokenizer.json.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bpe.h"
#include "pretokenizer.h"

namespace dflash::io {
class GGUFFile;
}

namespace dflash::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false;  // also swallow whitespace on that side of a match
  bool normalized = false;
};

struct Encoding {
  std::vector<int32_t> ids;
  // Byte range [first, second) of the text each token came from (empty for inserted tokens).
  std::vector<std::pair<size_t, size_t>> offsets;
};

class Tokenizer {
 public:
  // From GGUF metadata (tokenizer.ggml.model must be "gpt2"; tokenizer.ggml.pre picks the pre-tokenizer).
  static Tokenizer from_gguf(const io::GGUFFile& file);
  static Tokenizer from_gguf(const std::string& path);
  // From an HF tokenizer.json (BPE model, ByteLevel decoder); the chat template comes from a
  // tokenizer_config.json beside it when there is one.
  static Tokenizer from_tokenizer_json(const std::string& path);
  // The same from the file's text; `path` names it in errors and locates tokenizer_config.json.
  static Tokenizer from_tokenizer_json_text(const std::string& text, const std::string& path);
  // Either of the above, by the file's first bytes.
  static Tokenizer load(const std::string& path);

  Encoding encode_with_offsets(std::string_view text, bool add_special_tokens = true) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const {
    return encode_with_offsets(text, add_special_tokens).ids;
  }
  // ids -> text as HF's decode(ids, skip_special_tokens): bytes of invalid UTF-8 become U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  size_t vocab_size() const;  // model vocabulary plus added tokens beyond it
  int32_t token_to_id(const std::string& token) const;  // -1 when unknown
  std::string id_to_token(int32_t id) const;            // throws when out of range
  bool is_special(int32_t id) const;
  bool has_token(int32_t id) const;  // false for ids outside the vocabulary and for gaps below the added tokens

  int32_t bos_id() const { return bos_id_; }  // -1 when the source names none
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  const std::string& chat_template() const { return chat_template_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const PreTokenizer& pre_tokenizer() const { return pre_; }
  const std::string& source() const { return source_; }
  bool normalizes_nfc() const { return nfc_; }
  const BPE& bpe() const { return bpe_; }
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }  // added before the text
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }  // added after it

 private:
  void finish();  // indexes the added tokens
  void encode_plain(const std::vector<CodePoint>& cps, std::string_view text, size_t begin, size_t end,
                    Encoding& out) const;

  std::string source_;
  BPE bpe_;
  PreTokenizer pre_;
  std::vector<AddedToken> added_;
  bool nfc_ = false;  // tokenizer.json normalizer NFC (Qwen)
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added around the text when add_special_tokens
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  std::string chat_template_;
  // Added tokens by id (ids beyond the model vocabulary included).
  std::vector<int32_t> added_index_;  // id -> index in added_, or -1
};

}  // namespace dflash::tok
