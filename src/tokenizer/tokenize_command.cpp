// `dflash tokenize --model FILE --input IN.jsonl --output OUT.jsonl [--chat] [--decode]`: one JSON
// object per line in, one per line out ({"ids": [...]}, plus "assistant_mask" with --chat and
// "decoded" with --decode). Batch tool for tests and data preparation.
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "chat_template.h"
#include "tokenizer.h"
#include "tokenizer_commands.h"

namespace dflash::tok {

using util::Args;

int tokenize_main(const std::vector<std::string>& args) {
  Args a("tokenize", "tokenize JSONL text (or chat messages) with a GGUF or tokenizer.json vocabulary");
  a.option("model", "FILE", "", "a .gguf file or an HF tokenizer.json");
  a.option("input", "FILE", "", "JSONL: objects with the text field, or with \"messages\" for --chat");
  a.option("output", "FILE", "", "JSONL out, one object per input line, in order");
  a.option("field", "NAME", "text", "the field holding the text");
  a.flag("chat", "format as a chat (\"messages\": [{role, content}], or the text as one user turn) with the model's template; "
                 "\"add_generation_prompt\" per line, default true");
  a.flag("no-special", "do not add the post-processor's special tokens (HF add_special_tokens=False)");
  a.flag("decode", "also write \"decoded\": the ids decoded back to text");
  a.flag("decode-ids", "the other way: lines hold \"ids\": [...], write \"decoded\" text");
  a.flag("skip-special", "with --decode-ids: leave special tokens out (HF skip_special_tokens=True)");
  if (!a.parse(args)) return 0;
  for (const char* k : {"model", "input", "output"})
    if (a.str(k).empty()) throw std::invalid_argument(std::string("tokenize: --") + k + " is required\n" + a.help());

  tok::Tokenizer t = tok::Tokenizer::load(a.str("model"));
  std::optional<tok::ChatFormat> chat;
  if (a.on("chat")) chat = tok::ChatFormat::from_tokenizer(t);

  std::ifstream in(a.str("input"));
  if (!in) throw std::runtime_error(a.str("input") + ": cannot open");
  std::ofstream out(a.str("output"));
  if (!out) throw std::runtime_error(a.str("output") + ": cannot create");
  const std::string field = a.str("field");
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::string where = a.str("input") + ":" + std::to_string(lineno);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw std::runtime_error(where + ": not a JSON object");
    nlohmann::json o;
    std::vector<int32_t> ids;
    if (a.on("decode-ids")) {
      if (!j.contains("ids") || !j["ids"].is_array()) throw std::runtime_error(where + ": no \"ids\" array");
      o["decoded"] = t.decode(j["ids"].get<std::vector<int32_t>>(), a.on("skip-special"));
      out << o.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
      continue;
    }
    if (chat) {
      std::vector<tok::ChatMessage> msgs;
      if (j.contains("messages")) {
        for (const auto& m : j["messages"]) {
          if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
              !m["content"].is_string())
            throw std::runtime_error(where + ": messages: each needs string \"role\" and \"content\"");
          msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        }
      } else {
        if (!j.contains(field) || !j[field].is_string())
          throw std::runtime_error(where + ": no string field \"" + field + "\" and no \"messages\"");
        msgs.push_back({"user", j[field].get<std::string>()});
      }
      bool gen = j.value("add_generation_prompt", true);
      tok::ChatEncoding ce = chat->encode(t, msgs, gen);
      ids = ce.ids;
      o["assistant_mask"] = ce.assistant_mask;
      o["text"] = chat->render(msgs, gen).text;
    } else {
      if (!j.contains(field) || !j[field].is_string()) throw std::runtime_error(where + ": no string field \"" + field + "\"");
      ids = t.encode(j[field].get<std::string>(), !a.on("no-special"));
    }
    o["ids"] = ids;
    if (a.on("decode")) o["decoded"] = t.decode(ids);
    out << o.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
  }
  if (!out) throw std::runtime_error(a.str("output") + ": write failed");
  return 0;
}

}  // namespace dflash::tok
