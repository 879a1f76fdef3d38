// `dflash eval --engine llama.cpp`: the real serving engine on the same prompts as our eval. llama.cpp's
// llama-speculative-simple decodes each prompt with the target GGUF and the drafter GGUF that `dflash export --gguf`
// wrote (greedy, the same chat-templated prompt text, the same drafts per cycle and threads), and again with no drafts
// (the reference its output must equal), and llama-completion decodes it with the target alone (for its speed);
// reported are llama.cpp's own counters (tokens predicted, drafted, accepted: accepted per cycle
// = n_predict / (n_predict - n_accept), tau as llama.cpp measures it), both speeds and whether the speculative output
// equals the no-draft output (docs/EVAL.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dflash::eval {

struct LlamaCppSettings {
  std::string target_gguf, draft_gguf;
  int64_t max_new = 0;    // tokens per prompt (llama.cpp's -n)
  int64_t draft_max = 0;  // drafts per cycle (--spec-draft-n-max): our eval's max_draft, or the family's full block
  int64_t threads = 1;    // -t for the target and the drafter
};

struct LlamaCppDatasetReport {
  std::string name;
  int64_t prompts = 0, n_predict = 0, n_drafted = 0, n_accept = 0;
  double spec_seconds = 0, target_seconds = 0;  // decode time as llama.cpp reports it (prompt encoding excluded)
  int64_t spec_tokens = 0, target_tokens = 0;
  std::vector<int64_t> differing;  // prompt indices whose speculative text differs from the target-alone text
  std::map<int64_t, std::pair<int64_t, int64_t>> by_prompt;  // prompt index -> (n_predict, cycles)

  int64_t cycles() const { return n_predict - n_accept; }
  double accepted_per_cycle() const;  // n_predict / cycles
  double accepted_per_cycle_stderr() const;  // prompts as the unit, as DatasetReport::tau_stderr
  double tokens_per_s() const;
  double target_tokens_per_s() const;
  nlohmann::json to_json() const;
};

// Runs one prompt (its chat-templated text, `prompt_tokens` long) both ways and adds it to `rep`.
void run_llama_cpp_prompt(const LlamaCppSettings& s, int64_t prompt_index, const std::string& prompt_text,
                          int64_t prompt_tokens, LlamaCppDatasetReport& rep);

// The two engines side by side: our tau (when `our_tau` has the dataset) next to llama.cpp's.
void print_llama_cpp_table(const std::vector<LlamaCppDatasetReport>& reports,
                           const std::map<std::string, double>& our_tau);

}  // namespace dflash::eval
