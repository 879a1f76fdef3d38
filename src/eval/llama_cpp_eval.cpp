#include "llama_cpp_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "llama_cpp_tools.h"

namespace dflash::eval {

namespace {

constexpr const char* kWhat = "eval --engine llama.cpp";

// The integer after "<key> = " on a line of llama.cpp's log (speculative-simple's closing counters). The key is
// padded to align the '=' ("n_accept  = 3"), so any spaces may stand between key and '='.
int64_t counter(const std::string& log, const std::string& key) {
  for (size_t at = log.rfind(key); at != std::string::npos && at > 0; at = log.rfind(key, at - 1)) {
    const bool starts_word = log[at - 1] == ' ';
    size_t p = at + key.size();
    while (p < log.size() && log[p] == ' ') ++p;
    if (starts_word && p + 1 < log.size() && log[p] == '=' && log[p + 1] == ' ') return std::stoll(log.substr(p + 2));
  }
  throw std::runtime_error(std::string(kWhat) + ": llama-speculative-simple printed no '" + key +
                           "' counter; its last line: " + util::last_line(log));
}

// "decoded N tokens in S seconds": the decode (prompt encoding excluded) as llama-speculative-simple times it.
std::pair<int64_t, double> decoded(const std::string& log) {
  const size_t at = log.rfind("decoded ");
  long long n = 0;
  double s = 0;
  if (at == std::string::npos || std::sscanf(log.c_str() + at, "decoded %lld tokens in %lf seconds", &n, &s) != 2)
    throw std::runtime_error(std::string(kWhat) + ": llama-speculative-simple printed no decode time; its last line: " +
                             util::last_line(log));
  return {n, s};
}

struct Run {
  std::string text;  // the prompt and the generated text as llama-speculative-simple prints them, newlines trimmed
  std::string log;   // stderr
};

// speculative-simple prints "\n\n" + prompt + text + "\n\n" and stops before the end-of-generation token;
// trailing newlines of the text itself go with its own.
std::string trimmed(std::string s) {
  if (s.rfind("\n\n", 0) == 0) s.erase(0, 2);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<std::string> common_argv(const std::string& bin, const LlamaCppSettings& s, const std::string& prompt,
                                     int64_t n_predict, int64_t context) {
  const std::string threads = std::to_string(s.threads);
  return {bin, "-m", s.target_gguf, "-p", prompt, "-n", std::to_string(n_predict), "-c", std::to_string(context),
          "--temp", "0", "--top-k", "1", "--seed", "0", "-t", threads, "-tb", threads, "-ngl", "0"};
}

Run finish(util::ProcessResult r, const std::string& what) {
  if (r.exit_code != 0)
    throw std::runtime_error(std::string(kWhat) + ": " + what + " exited " + std::to_string(r.exit_code) + ": " +
                             util::last_line(r.err));
  return {trimmed(r.out), std::move(r.err)};
}

// llama-speculative-simple, greedy, with the draft GGUF and `drafts` drafts per cycle. With 0 it is the target
// alone as this program decodes it (the same prompt batches, tokens and sampler; only the drafts are gone): the
// reference its speculative output must equal. llama-completion is no such reference: it computes the prompt's last
// token inside the prompt's batch, where speculative-simple computes it alone, and on this CPU ggml's kernels round
// the two differently, so at near ties their answers part (docs/BENCHMARKS.md "Agreement with llama.cpp").
Run speculative(const LlamaCppSettings& s, const std::string& prompt, int64_t context, int64_t drafts) {
  auto argv = common_argv(util::llama_cpp_program("llama-speculative-simple", kWhat), s, prompt, s.max_new, context);
  const std::string threads = std::to_string(s.threads);
  for (const std::string& a : {std::string("-md"), s.draft_gguf, std::string("--spec-draft-n-max"),
                               std::to_string(drafts), std::string("--spec-draft-n-min"), std::string("0"),
                               std::string("--spec-draft-p-min"), std::string("0"), std::string("-td"), threads,
                               std::string("-tbd"), threads})
    argv.push_back(a);
  return finish(util::run_process(argv), "llama-speculative-simple with " + s.draft_gguf);
}

// The target alone for its speed: llama-completion, greedy, the same threads, -n + 1 tokens as speculative-simple
// decodes at least (it stops after the cycle that takes it past -n).
Run target_alone(const LlamaCppSettings& s, const std::string& prompt, int64_t context) {
  auto argv = common_argv(util::llama_cpp_program("llama-completion", kWhat), s, prompt, s.max_new + 1, context);
  argv.push_back("-no-cnv");
  return finish(util::run_process(argv), "llama-completion (the target alone)");
}

// llama-completion's decode: "eval time = X ms / N runs" (prompt evaluation excluded).
std::pair<int64_t, double> completion_decoded(const std::string& log) {
  const size_t at = log.rfind("eval time =");
  double ms = 0;
  long long n = 0;
  if (at == std::string::npos || (at > 0 && log[at - 1] != ' ') ||
      std::sscanf(log.c_str() + at, "eval time = %lf ms / %lld runs", &ms, &n) != 2)
    throw std::runtime_error(std::string(kWhat) + ": llama-completion printed no eval time; its last line: " +
                             util::last_line(log));
  return {n, ms / 1e3};
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

void run_llama_cpp_prompt(const LlamaCppSettings& s, int64_t prompt_index, const std::string& prompt_text,
                          int64_t prompt_tokens, LlamaCppDatasetReport& rep) {
  // Room for the prompt, the tokens and one cycle's drafts beyond them.
  const int64_t context = std::max<int64_t>(256, prompt_tokens + s.max_new + s.draft_max + 16);
  const Run base = target_alone(s, prompt_text, context);
  const Run plain = speculative(s, prompt_text, context, 0);
  const Run spec = speculative(s, prompt_text, context, s.draft_max);
  const int64_t n_predict = counter(spec.log, "n_predict"), n_accept = counter(spec.log, "n_accept");
  ++rep.prompts;
  rep.n_predict += n_predict;
  rep.n_drafted += counter(spec.log, "n_drafted");
  rep.n_accept += n_accept;
  const auto [spec_tokens, spec_s] = decoded(spec.log);
  const auto [base_tokens, base_s] = completion_decoded(base.log);
  rep.spec_tokens += spec_tokens;
  rep.spec_seconds += spec_s;
  rep.target_tokens += base_tokens;
  rep.target_seconds += base_s;
  auto& [p_predict, p_cycles] = rep.by_prompt[prompt_index];
  p_predict += n_predict;
  p_cycles += n_predict - n_accept;
  // Equal, or, where both were stopped for their length (-n; not at the end-of-generation token), the one a
  // prefix of the other: a speculative cycle may commit up to its drafts past -n.
  const bool cut_by_length = n_predict > s.max_new && counter(plain.log, "n_predict") > s.max_new;
  if (spec.text != plain.text &&
      !(cut_by_length && (starts_with(spec.text, plain.text) || starts_with(plain.text, spec.text))))
    rep.differing.push_back(prompt_index);
}

double LlamaCppDatasetReport::accepted_per_cycle() const {
  return cycles() > 0 ? static_cast<double>(n_predict) / static_cast<double>(cycles()) : 0.0;
}

double LlamaCppDatasetReport::accepted_per_cycle_stderr() const {
  const double n = static_cast<double>(by_prompt.size());
  if (n < 2 || cycles() <= 0) return std::numeric_limits<double>::quiet_NaN();
  const double t = accepted_per_cycle();
  double ss = 0;
  for (const auto& [index, pc] : by_prompt) {
    const double r = static_cast<double>(pc.first) - t * static_cast<double>(pc.second);
    ss += r * r;
  }
  return std::sqrt(n / (n - 1) * ss) / static_cast<double>(cycles());
}

double LlamaCppDatasetReport::tokens_per_s() const { return spec_seconds > 0 ? spec_tokens / spec_seconds : 0.0; }
double LlamaCppDatasetReport::target_tokens_per_s() const {
  return target_seconds > 0 ? target_tokens / target_seconds : 0.0;
}

nlohmann::json LlamaCppDatasetReport::to_json() const {
  const double se = accepted_per_cycle_stderr(), base = target_tokens_per_s();
  nlohmann::json per_prompt = nlohmann::json::array();
  for (const auto& [index, pc] : by_prompt)
    per_prompt.push_back({{"index", index}, {"n_predict", pc.first}, {"cycles", pc.second}});
  return {{"name", name},
          {"prompts", prompts},
          {"n_predict", n_predict},
          {"n_drafted", n_drafted},
          {"n_accept", n_accept},
          {"cycles", cycles()},
          {"accepted_per_cycle", accepted_per_cycle()},
          {"accepted_per_cycle_stderr", std::isnan(se) ? nlohmann::json(nullptr) : nlohmann::json(se)},
          {"tokens_per_s", tokens_per_s()},
          {"target_tokens_per_s", base},
          {"speedup", base > 0 ? tokens_per_s() / base : 0.0},
          {"output_equals_target", differing.empty()},
          {"differing_prompts", differing},
          {"per_prompt", per_prompt}};
}

void print_llama_cpp_table(const std::vector<LlamaCppDatasetReport>& reports,
                           const std::map<std::string, double>& our_tau) {
  std::printf("%-14s %7s %8s %9s %6s %9s %12s %12s %12s\n", "llama.cpp", "prompts", "our tau", "llama tau", "+-se",
              "speedup", "spec tok/s", "target tok/s", "same output");
  for (const auto& r : reports) {
    char ours[16] = "-", se[16] = "-";
    if (auto it = our_tau.find(r.name); it != our_tau.end()) std::snprintf(ours, sizeof ours, "%.2f", it->second);
    if (const double e = r.accepted_per_cycle_stderr(); !std::isnan(e)) std::snprintf(se, sizeof se, "%.2f", e);
    const double base = r.target_tokens_per_s();
    std::printf("%-14s %7lld %8s %9.2f %6s %8.2fx %12.1f %12.1f %12s\n", r.name.c_str(),
                static_cast<long long>(r.prompts), ours, r.accepted_per_cycle(), se,
                base > 0 ? r.tokens_per_s() / base : 0.0, r.tokens_per_s(), base, r.differing.empty() ? "yes" : "NO");
  }
  std::fflush(stdout);
}

}  // namespace dflash::eval
