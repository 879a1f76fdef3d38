// `dflash tokenize --model FILE --input IN.jsonl --output OUT.jsonl [--chat] [--decode]`: one JSON
// object per line in, one per line out ({"ids": [...]}, plus "assistant_mask" with --chat and
// "decoded" with --decode). Batch tool for tests and data preparation.
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "atomic_output.h"
#include "chat_template.h"
#include "input_file.h"
#include "strict_json.h"
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
  if (a.given("output")) io::check_output_path(a.str("output"), "tokenize: --output");  // before any work
  for (const char* k : {"model", "input", "output"})
    if (a.str(k).empty()) throw std::invalid_argument(std::string("tokenize: --") + k + " is required\n" + a.help());

  tok::Tokenizer t = tok::Tokenizer::load(a.str("model"));
  std::optional<tok::ChatFormat> chat;
  if (a.on("chat")) chat = tok::ChatFormat::from_tokenizer(t);

  const std::string text = io::read_regular_file(a.str("input"));  // a FIFO or a folder: one clear error
  // Whole or absent: a failure on line 900 must not leave 899 lines that look like a finished output.
  io::AtomicOutputFile out(a.str("output"));
  const std::string field = a.str("field");
  std::string line;
  size_t lineno = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (line.empty()) continue;
    std::string where = a.str("input") + ":" + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = io::parse_json_strict(line);
    } catch (const io::JsonError& e) {
      throw std::runtime_error(where + ": " + e.what());
    }
    if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
    nlohmann::json o;
    std::vector<int32_t> ids;
    if (a.on("decode-ids")) {
      if (!j.contains("ids") || !j["ids"].is_array()) throw std::runtime_error(where + ": no \"ids\" array");
      std::vector<int32_t> in_ids;
      for (size_t k = 0; k < j["ids"].size(); ++k) {
        const auto& v = j["ids"][k];
        const auto id = io::json_integer_in(v, 0, int64_t(t.vocab_size()) - 1);  // 3.0 is no token id
        if (!id)
          throw std::runtime_error(where + ": ids[" + std::to_string(k) + "] is " + io::json_shown(v) +
                                   ", expected a token id (an integer in [0, " + std::to_string(t.vocab_size()) + "))");
        in_ids.push_back(static_cast<int32_t>(*id));
      }
      o["decoded"] = t.decode(in_ids, a.on("skip-special"));
      out.write(o.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + "\n");
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
      if (j.contains("add_generation_prompt") && !j["add_generation_prompt"].is_boolean())
        throw std::runtime_error(where + ": \"add_generation_prompt\" must be true or false");
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
    out.write(o.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + "\n");
  }
  out.commit();
  return 0;
}

}  // namespace dflash::tok
