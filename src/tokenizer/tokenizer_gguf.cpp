// Tokenizer from GGUF metadata (llama.cpp's tokenizer.ggml.* keys), built the way transformers'
// GGUF loader builds it, except that tokenizer.ggml.pre is honoured for every pre-tokenizer we know
// (transformers falls back to plain GPT-2 splitting for "smollm", losing its digit splitting).
#include <stdexcept>

#include "gguf.h"
#include "tokenizer.h"

namespace dflash::tok {

namespace {

// llama.cpp's pre-tokenizer names -> the HF pre-tokenizer of the original tokenizer.json.
PreTokenizer pre_tokenizer_for(const std::string& path, const std::string& pre) {
  using S = PreTokenizerStep;
  if (pre == "smollm" || pre == "starcoder")  // Digits(individual) + ByteLevel
    return PreTokenizer({{S::kDigits, SplitRegex::GPT2, true}, {S::kSplit, SplitRegex::GPT2, false}});
  if (pre == "gpt-2" || pre == "gpt2") return PreTokenizer({{S::kSplit, SplitRegex::GPT2, false}});
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe" || pre == "dbrx" ||
      pre == "falcon3")
    return PreTokenizer({{S::kSplit, SplitRegex::LLAMA3, false}});
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizer({{S::kSplit, SplitRegex::QWEN2, false}});
  throw std::runtime_error(path + ": metadata 'tokenizer.ggml.pre' = '" + pre +
                           "' is not supported (known: smollm, starcoder, gpt-2, llama-bpe/llama3, qwen2)");
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const std::string& path) { return from_gguf(io::GGUFFile::open(path)); }

Tokenizer Tokenizer::from_gguf(const io::GGUFFile& f) {
  const std::string& path = f.path();
  std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw std::runtime_error(path + ": metadata 'tokenizer.ggml.model' = '" + model +
                             "' is not supported (expected 'gpt2', byte-level BPE)");
  std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types;
  if (f.has("tokenizer.ggml.token_type")) {
    types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      throw std::runtime_error(path + ": metadata 'tokenizer.ggml.token_type' has " + std::to_string(types.size()) +
                               " entries (expected one per token: " + std::to_string(tokens.size()) + ")");
  }
  // Tokens are stored in the byte alphabet; one that is not (a user-defined token written as plain
  // text) is respelled byte by byte, as transformers does. Added tokens keep the stored spelling.
  std::vector<bool> in_alphabet(tokens.size(), true);
  std::vector<std::string> vocab(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (const CodePoint& c : decode_utf8(tokens[i]))
      if (unicode_to_byte(c.cp) < 0) in_alphabet[i] = false;
    vocab[i] = in_alphabet[i] ? tokens[i] : bytes_to_alphabet(tokens[i]);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (f.has("tokenizer.ggml.merges")) {
    std::vector<std::string> raw = f.get_string_array("tokenizer.ggml.merges");
    merges.reserve(raw.size());
    for (size_t r = 0; r < raw.size(); ++r) {
      size_t sp = raw[r].find(' ');
      if (sp == std::string::npos || raw[r].find(' ', sp + 1) != std::string::npos)
        throw std::runtime_error(path + ": metadata 'tokenizer.ggml.merges'[" + std::to_string(r) + "] = '" + raw[r] +
                                 "' (expected two tokens separated by one space)");
      merges.emplace_back(raw[r].substr(0, sp), raw[r].substr(sp + 1));
    }
  }
  Tokenizer t;
  t.source_ = path;
  t.bpe_ = BPE(vocab, merges, false, path + ": metadata 'tokenizer.ggml.merges'");
  t.pre_ = pre_tokenizer_for(path, f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "gpt-2");
  for (size_t i = 0; i < types.size(); ++i) {
    // 3 = CONTROL: special added tokens; 4 = USER_DEFINED: plain added tokens, matched whole.
    if (types[i] == 3 && in_alphabet[i])
      t.added_.push_back({tokens[i], static_cast<int32_t>(i), true, false, false, false});
    else if (types[i] == 4 && in_alphabet[i])
      t.added_.push_back({tokens[i], static_cast<int32_t>(i), false, false, false, false});
  }
  auto id_key = [&](const char* key) -> int32_t {
    if (!f.has(key)) return -1;
    int64_t id = f.get_int(key);
    if (id < 0 || static_cast<size_t>(id) >= tokens.size())
      throw std::runtime_error(path + ": metadata '" + key + "' = " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(tokens.size()) + ")");
    return static_cast<int32_t>(id);
  };
  t.bos_id_ = id_key("tokenizer.ggml.bos_token_id");
  t.eos_id_ = id_key("tokenizer.ggml.eos_token_id");
  t.pad_id_ = id_key("tokenizer.ggml.padding_token_id");
  if (f.has("tokenizer.ggml.add_bos_token") && f.get_bool("tokenizer.ggml.add_bos_token") && t.bos_id_ >= 0)
    t.prefix_ids_.push_back(t.bos_id_);
  if (f.has("tokenizer.ggml.add_eos_token") && f.get_bool("tokenizer.ggml.add_eos_token") && t.eos_id_ >= 0)
    t.suffix_ids_.push_back(t.eos_id_);
  if (f.has("tokenizer.chat_template")) t.chat_template_ = f.get_string("tokenizer.chat_template");
  t.finish();
  return t;
}

}  // namespace dflash::tok
