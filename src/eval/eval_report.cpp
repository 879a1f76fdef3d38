#include "eval_report.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

namespace dflash::eval {

DatasetReport::DatasetReport(std::string n, int64_t B)
    : name(std::move(n)), block_size(B), accept_hist(static_cast<size_t>(B + 1), 0),
      slot_reached(static_cast<size_t>(B - 1), 0), slot_accepted(static_cast<size_t>(B - 1), 0) {}

void DatasetReport::add(const SpecResult& s, double base_s, int64_t base_tokens, int64_t prompt_index) {
  ++prompts;
  new_tokens += static_cast<int64_t>(s.tokens.size());
  baseline_tokens += base_tokens;
  seconds += s.seconds;
  baseline_seconds += base_s;
  draft_s += s.draft_s;
  verify_s += s.verify_s;
  verify_head_s += s.verify_head_s;
  commit_s += s.commit_s;
  auto& [prompt_accepted, prompt_cycles] = by_prompt[prompt_index];
  for (auto k : s.accept_lengths) {
    ++cycles;
    accepted_sum += k;
    ++prompt_cycles;
    prompt_accepted += k;
    if (k >= 0 && k < static_cast<int64_t>(accept_hist.size())) ++accept_hist[static_cast<size_t>(k)];
  }
  for (size_t i = 0; i < slot_reached.size() && i < s.slot_reached.size(); ++i) {
    slot_reached[i] += s.slot_reached[i];
    slot_accepted[i] += s.slot_accepted[i];
  }
}

double DatasetReport::per_cycle_ms(double total_s) const { return cycles > 0 ? 1e3 * total_s / cycles : 0.0; }

double DatasetReport::tau() const { return cycles > 0 ? static_cast<double>(accepted_sum) / cycles : 0.0; }
double DatasetReport::tau_stderr() const {
  const double n = static_cast<double>(by_prompt.size());
  if (n < 2 || cycles == 0) return std::numeric_limits<double>::quiet_NaN();
  const double t = tau();
  double ss = 0;
  for (const auto& [index, ac] : by_prompt) {
    const double r = static_cast<double>(ac.first) - t * static_cast<double>(ac.second);
    ss += r * r;
  }
  return std::sqrt(n / (n - 1) * ss) / static_cast<double>(cycles);
}
double DatasetReport::tokens_per_s() const { return seconds > 0 ? new_tokens / seconds : 0.0; }
double DatasetReport::baseline_tokens_per_s() const {
  return baseline_seconds > 0 ? baseline_tokens / baseline_seconds : 0.0;
}

nlohmann::json DatasetReport::to_json() const {
  std::vector<double> slot_rate;
  for (size_t i = 0; i < slot_reached.size(); ++i)
    slot_rate.push_back(slot_reached[i] > 0 ? static_cast<double>(slot_accepted[i]) / slot_reached[i] : 0.0);
  nlohmann::json mm = nlohmann::json::array();
  for (const auto& m : mismatches)
    mm.push_back({{"prompt", m.prompt_index}, {"position", m.position}, {"expected", m.expected}, {"got", m.got}});
  const double base = baseline_tokens_per_s();
  const double se = tau_stderr();
  return {{"name", name},
          {"prompts", prompts},
          {"block_size", block_size},
          {"tau", tau()},
          {"tau_stderr", std::isnan(se) ? nlohmann::json(nullptr) : nlohmann::json(se)},
          {"accept_hist", accept_hist},
          {"slot_acceptance", slot_rate},
          {"cycles", cycles},
          {"new_tokens", new_tokens},
          {"tokens_per_s", tokens_per_s()},
          {"baseline_tokens_per_s", base},
          {"speedup", base > 0 ? tokens_per_s() / base : 0.0},
          {"lossless", lossless_checked ? nlohmann::json(mismatches.empty()) : nlohmann::json(nullptr)},
          {"mismatches", mm},
          {"cycle_ms", {{"draft", per_cycle_ms(draft_s)},
                        {"verify_forward", per_cycle_ms(verify_s)},
                        {"verify_lm_head", per_cycle_ms(verify_head_s)},
                        {"commit", per_cycle_ms(commit_s)}}}};
}

bool compare_tokens(const std::vector<int64_t>& expected, const std::vector<int64_t>& got, int64_t prompt_index,
                    Mismatch* out) {
  const size_t n = std::max(expected.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t e = i < expected.size() ? expected[i] : -1, g = i < got.size() ? got[i] : -1;
    if (e != g) {
      *out = {prompt_index, static_cast<int64_t>(i), e, g};
      return false;
    }
  }
  return true;
}

void print_table(const std::vector<DatasetReport>& reports) {
  std::printf("%-14s %7s %6s %6s %9s %12s %12s %9s\n", "dataset", "prompts", "tau", "+-se", "speedup", "spec tok/s",
              "target tok/s", "lossless");
  for (const auto& r : reports) {
    const double base = r.baseline_tokens_per_s();
    char se[16] = "-";
    if (const double e = r.tau_stderr(); !std::isnan(e)) std::snprintf(se, sizeof se, "%.2f", e);
    std::printf("%-14s %7lld %6.2f %6s %8.2fx %12.1f %12.1f %9s\n", r.name.c_str(), static_cast<long long>(r.prompts),
                r.tau(), se, base > 0 ? r.tokens_per_s() / base : 0.0, r.tokens_per_s(), base,
                !r.lossless_checked ? "n/a" : r.mismatches.empty() ? "yes" : "NO");
  }
  std::fflush(stdout);
}

void print_cycle_breakdown(const std::vector<DatasetReport>& reports) {
  std::printf("%-14s %8s %8s %8s %8s %8s %12s\n", "ms per cycle", "draft", "verify", "lm head", "commit", "total",
              "target step");
  for (const auto& r : reports) {
    const double base = r.baseline_tokens_per_s();
    const double parts[] = {r.per_cycle_ms(r.draft_s), r.per_cycle_ms(r.verify_s), r.per_cycle_ms(r.verify_head_s),
                            r.per_cycle_ms(r.commit_s)};
    std::printf("%-14s %8.1f %8.1f %8.1f %8.1f %8.1f %12.1f\n", r.name.c_str(), parts[0], parts[1], parts[2], parts[3],
                parts[0] + parts[1] + parts[2] + parts[3], base > 0 ? 1e3 / base : 0.0);
  }
  std::fflush(stdout);
}

}  // namespace dflash::eval
