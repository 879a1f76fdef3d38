// Chat formatting without a Jinja engine: the GGUF / tokenizer_config chat template is recognised as
// one of the formats below and reproduced exactly (tests compare with the Jinja rendering).
//  - ChatML (SmolLM2, Qwen): <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, with the template's
//    default system prompt put first when the first message is not a system message; the generation
//    prompt is <|im_start|>assistant\n.
//  - Llama-3.0: BOS, then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT.strip()<|eot_id|>.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer.h"

namespace dflash::tok {

struct ChatMessage {
  std::string role, content;
};

struct ChatText {
  std::string text;
  // Byte ranges of each assistant message's content and its end-of-turn marker: what the model
  // must learn to produce.
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

struct ChatEncoding {
  std::vector<int32_t> ids;
  std::vector<uint8_t> assistant_mask;  // 1 for tokens inside an assistant span
};

class ChatFormat {
 public:
  enum Kind { kChatML, kLlama3 };
  // Recognises `jinja` (throws naming `source` when it is none of the known formats).
  static ChatFormat from_template(const std::string& jinja, const std::string& bos_token, const std::string& source);
  static ChatFormat from_tokenizer(const Tokenizer& t);

  ChatText render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // Renders and tokenizes (no extra BOS: the format writes its own), with the assistant mask.
  ChatEncoding encode(const Tokenizer& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  Kind kind() const { return kind_; }
  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  Kind kind_ = kChatML;
  std::optional<std::string> default_system_;
  std::string bos_;
};

}  // namespace dflash::tok
