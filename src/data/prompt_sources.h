// Prompts for data regeneration and evaluation, read from the JSONL formats of ../shared/data and a generic
// chat format. Each line is one prompt; the first matching field wins:
//   {"messages":[{"role","content"},...]}  (generic chat; a trailing assistant turn is dropped)
//   {"prompt_ids":[...]}                     (already tokenized; used by tests on tiny models)
//   {"turns":[first, ...]}                   (MT-Bench / Vicuna-bench: the first turn)
//   {"question": "..."}                      (GSM8K)
//   {"prompt": "..."}                        (HumanEval)
// Files ending in .gz are decompressed on the fly (corrupt gzip data is an error). Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "chat_template.h"

namespace dflash::data {

struct Prompt {
  int64_t index = 0;                      // 0-based line number among non-empty lines of the file
  std::vector<tok::ChatMessage> messages;  // empty when prompt_ids is used
  std::vector<int64_t> prompt_ids;
};

// Whole file as text; a name ending in .gz is decompressed. Throws naming the file when it cannot be read, is
// not a regular file, or (.gz) holds corrupt or truncated gzip data, or no gzip data at all.
std::string read_text_file(const std::string& path);

// Parses every non-empty line; `limit` < 0 means all. Throws "<path>:<line>: ..." naming the expected fields,
// and when a file holds no prompt at all (limit != 0).
std::vector<Prompt> read_prompts(const std::string& path, int64_t limit = -1);
// The same on text already read (`path` names it in errors); an empty text gives no prompts.
std::vector<Prompt> parse_prompts(const std::string& text, const std::string& path, int64_t limit = -1);

// The user text of a prompt (all user turns joined by "\n"), for held-out overlap checks.
std::string prompt_user_text(const Prompt& p);

}  // namespace dflash::data
