// Samples and prompts JSONL: the token records `dflash train` and `dump-hidden` read (integer ids, 0/1 masks,
// held-out checks, a torn last line) and the prompt formats `regenerate` and `eval` read.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "prompt_sources.h"
#include "token_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean("fuzz-samples.jsonl", [&] { data::parse_token_records(text, "fuzz-samples.jsonl", -1, false); });
  fuzz::expect_clean("fuzz-samples.jsonl", [&] { data::parse_token_records(text, "fuzz-samples.jsonl", 3, true); });
  fuzz::expect_clean("fuzz-prompts.jsonl", [&] {
    for (const auto& p : data::parse_prompts(text, "fuzz-prompts.jsonl")) (void)data::prompt_user_text(p);
  });
  return 0;
}
