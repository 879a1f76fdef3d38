// JSON as read from files users write (configs, tokenizer.json, headers, JSONL lines). Stricter than
// nlohmann::json::parse in the ways that otherwise give silently wrong results: a key given twice in one object
// is an error (nlohmann keeps the last one), and nesting deeper than kMaxJsonDepth is refused (recursive code
// such as dump() would run out of stack). Framework-free.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace dflash::io {

inline constexpr int kMaxJsonDepth = 100;

// The message says what is wrong, without naming the source: callers prefix the file (and line).
struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws JsonError: "not valid JSON: ...", "key 'k' appears twice in one object (in 'a.b')",
// "nested deeper than 100 levels".
nlohmann::json parse_json_strict(std::string_view text);

// `v` as an int64 when it is a JSON integer (not a float such as 3.0 or 3.5, not a bool) within [lo, hi];
// nullopt otherwise. Unsigned values above INT64_MAX are out of range, never wrapped to negative numbers.
std::optional<int64_t> json_integer_in(const nlohmann::json& v, int64_t lo, int64_t hi);

// `v` as written (its JSON text, cut to 80 characters), for messages: a 2^64-1 shows as 18446744073709551615.
std::string json_shown(const nlohmann::json& v);

}  // namespace dflash::io
