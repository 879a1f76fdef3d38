// The samples files `dflash data regenerate` writes (JSONL, optionally .gz): one
// {"input_ids": [...], "loss_mask": [...], ...} object per line. Read by the trainer and by dump-hidden.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash::data {

struct TokenRecord {
  std::vector<int64_t> ids, mask;  // same length, >= 2
  std::string where;               // "file:line", for later error messages
  int64_t index = -1;              // the line's integer "index" (regenerate's prompt index); -1 when absent
};

// Every sample in line order (at most `limit`; -1: all). Malformed lines and held-out samples are errors
// naming file:line. With `skip_partial_last_line`, an unparsable unterminated last line (a writer still
// appending) is skipped with a warning instead.
// Token ids must be integers in [0, 2^31-1] (a float such as 3.0 is an error) and loss_mask entries 0/1/bool.
std::vector<TokenRecord> read_token_records(const std::string& path, int64_t limit, bool skip_partial_last_line);
// The same on text already read; `path` names it in errors.
std::vector<TokenRecord> parse_token_records(const std::string& text, const std::string& path, int64_t limit,
                                             bool skip_partial_last_line);

}  // namespace dflash::data
