// Per-dataset results of an evaluation run: acceptance (tau, histogram, per-slot rates), speed with and
// without speculation, and the lossless check; printed as a table and written as JSON.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "speculative_decoder.h"

namespace dflash::eval {

struct Mismatch {
  int64_t prompt_index = 0, position = 0, expected = -1, got = -1;  // -1: that side ended earlier
};

struct DatasetReport {
  std::string name;
  int64_t block_size = 0;
  int64_t prompts = 0, new_tokens = 0, baseline_tokens = 0, cycles = 0, accepted_sum = 0;
  double seconds = 0, baseline_seconds = 0;
  double draft_s = 0, verify_s = 0, verify_head_s = 0, commit_s = 0;  // summed SpecResult phase times
  std::vector<int64_t> accept_hist;                  // [B + 1]: cycles that committed k tokens (k = 1..B)
  std::vector<int64_t> slot_reached, slot_accepted;  // per draft slot
  std::map<int64_t, std::pair<int64_t, int64_t>> by_prompt;  // prompt index -> (committed tokens, cycles)
  bool lossless_checked = false;
  std::vector<Mismatch> mismatches;

  explicit DatasetReport(std::string n, int64_t B);
  void add(const SpecResult& spec, double baseline_seconds, int64_t baseline_tokens, int64_t prompt_index);
  double tau() const;
  // Standard error of tau with prompts as the unit: cycles of one prompt are correlated (an easy prompt
  // accepts long runs throughout), so a per-cycle error would be too small. tau is a ratio of sums over
  // prompts, sum(a_i) / sum(c_i); its linearised (delta-method) error is
  //   sqrt(n / (n - 1) * sum_i (a_i - tau c_i)^2) / sum_i c_i.
  // NaN below 2 prompts. Repeats of a prompt count as one.
  double tau_stderr() const;
  double per_cycle_ms(double total_s) const;
  double tokens_per_s() const;
  double baseline_tokens_per_s() const;
  nlohmann::json to_json() const;
};

// First differing position between the target's own decode and the speculative one (or none).
bool compare_tokens(const std::vector<int64_t>& expected, const std::vector<int64_t>& got, int64_t prompt_index,
                    Mismatch* out);

void print_table(const std::vector<DatasetReport>& reports);
// Per dataset: milliseconds per cycle in each phase next to one target decode step (from the baseline).
void print_cycle_breakdown(const std::vector<DatasetReport>& reports);

}  // namespace dflash::eval
