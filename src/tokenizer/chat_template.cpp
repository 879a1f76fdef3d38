#include "chat_template.h"

#include <stdexcept>

#include "unicode.h"

namespace dflash::tok {

namespace {

// Python's str.strip() (what Jinja's `trim` calls): Unicode whitespace plus U+001C..U+001F.
std::string py_strip(const std::string& s) {
  auto cps = decode_utf8(s);
  auto ws = [](const CodePoint& c) { return (c.cls & kWhitespace) || (c.cp >= 0x1C && c.cp <= 0x1F); };
  size_t a = 0, b = cps.size();
  while (a < b && ws(cps[a])) ++a;
  while (b > a && ws(cps[b - 1])) --b;
  size_t lo = a < cps.size() ? cps[a].byte_pos : s.size();
  size_t hi = b < cps.size() ? cps[b].byte_pos : s.size();
  return s.substr(lo, hi - lo);
}

// The text of a Jinja string literal's escapes we meet in templates: \n, \t, \', \", \\.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

ChatFormat ChatFormat::from_tokenizer(const Tokenizer& t) {
  if (t.chat_template().empty()) throw std::runtime_error(t.source() + ": no chat template in the tokenizer's files");
  return from_template(t.chat_template(), t.bos_id() >= 0 ? t.id_to_token(t.bos_id()) : "", t.source());
}

ChatFormat ChatFormat::from_template(const std::string& jinja, const std::string& bos_token, const std::string& source) {
  ChatFormat f;
  f.bos_ = bos_token;
  if (jinja.find("<|im_start|>") != std::string::npos && jinja.find("<|im_end|>") != std::string::npos) {
    if (jinja.find("tools") != std::string::npos || jinja.find("reasoning_content") != std::string::npos)
      throw std::runtime_error(source + ": chat template: ChatML with tools/reasoning is not supported");
    f.kind_ = kChatML;
    // A default system prompt is a literal '<|im_start|>system\n...<|im_end|>' in the template.
    const std::string head = "<|im_start|>system";
    size_t p = jinja.find(head);
    if (p != std::string::npos) {
      size_t q = p + head.size();
      size_t skip = jinja.compare(q, 1, "\n") == 0 ? 1 : jinja.compare(q, 2, "\\n") == 0 ? 2 : 0;
      size_t e = jinja.find("<|im_end|>", q);
      if (skip && e != std::string::npos) {
        std::string body = jinja.substr(q + skip, e - q - skip);
        if (body.find("{{") == std::string::npos && body.find('\'') == std::string::npos)
          f.default_system_ = unescape(body);
      }
    }
    return f;
  }
  if (jinja.find("<|start_header_id|>") != std::string::npos) {
    if (jinja.find("Cutting Knowledge") != std::string::npos || jinja.find("tools") != std::string::npos)
      throw std::runtime_error(source + ": chat template: Llama-3.1+ (dates, tools) is not supported, only Llama-3.0");
    f.kind_ = kLlama3;
    return f;
  }
  throw std::runtime_error(source + ": chat template is neither ChatML nor Llama-3 (not supported)");
}

ChatText ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ChatText out;
  std::string& s = out.text;
  if (kind_ == kChatML) {
    if (default_system_ && (messages.empty() || messages[0].role != "system"))
      // SmolLM2's template writes it only inside the loop (loop.first), so not for an empty list.
      if (!messages.empty()) s += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
    for (const auto& m : messages) {
      s += "<|im_start|>" + m.role + "\n";
      size_t a = s.size();
      s += m.content + "<|im_end|>";
      if (m.role == "assistant") out.assistant_spans.emplace_back(a, s.size());
      s += "\n";
    }
    if (add_generation_prompt) s += "<|im_start|>assistant\n";
  } else {
    if (!messages.empty()) s += bos_;  // the template writes it with the first message
    for (const auto& m : messages) {
      s += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      size_t a = s.size();
      s += py_strip(m.content) + "<|eot_id|>";
      if (m.role == "assistant") out.assistant_spans.emplace_back(a, s.size());
    }
    if (add_generation_prompt) s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return out;
}

ChatEncoding ChatFormat::encode(const Tokenizer& t, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  ChatText ct = render(messages, add_generation_prompt);
  Encoding e = t.encode_with_offsets(ct.text, false);
  ChatEncoding out;
  out.ids = std::move(e.ids);
  out.assistant_mask.assign(out.ids.size(), 0);
  size_t span = 0;
  for (size_t k = 0; k < out.ids.size(); ++k) {
    auto [lo, hi] = e.offsets[k];
    while (span < ct.assistant_spans.size() && ct.assistant_spans[span].second <= lo) ++span;
    if (span < ct.assistant_spans.size() && hi > ct.assistant_spans[span].first && lo < ct.assistant_spans[span].second)
      out.assistant_mask[k] = 1;
  }
  return out;
}

}  // namespace dflash::tok
