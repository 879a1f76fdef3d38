// What the user sees during training: a one-line bar on a terminal (step, loss, slot accuracy, tokens/s,
// ETA, RSS, and which side is the bottleneck: "target 97% busy, drafters 41% busy: target-bound"), plain lines
// otherwise, and RUN_DIR/metrics.jsonl (one JSON object per log step, plus event lines such as the attention
// backend chosen before step 1).
// Only the lead process (rank 0) writes.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dflash::train {

struct StepMetrics {
  int64_t step = 0;  // steps done, 1-based
  double loss = 0, acc = 0, lr = 0, grad_norm = 0, tokens = 0, step_seconds = 0;
  std::vector<double> slot_acc;
  double out_of_vocab = -1;  // draft vocabulary: fraction of loss rows whose target it lacks (-1: full vocabulary)
  double samples = 0;        // sequences of the step (all processes)
  // The family's own metrics, by name (drafter/family_training.h's step_metrics: DSpark's tau_probabilistic,
  // accept_rate@j, ...; DFlash2's selector_loss, ...), written to metrics.jsonl, and what of them the progress line
  // shows (appended as is).
  std::vector<std::pair<std::string, double>> family;
  std::string family_progress;
  // This process's seconds of computing during the step: its producer (per replica the busiest thread, averaged
  // over replicas: the target online, data loading offline) and its drafter workers (averaged over workers).
  double producer_busy_seconds = 0, drafter_busy_seconds = 0;
};

// Busy fractions and rates over a window of steps, for metrics.jsonl and the progress line.
struct BusyReport {
  double samples_per_s = 0;
  double producer_busy = 0, drafter_busy = 0;  // in [0, 1]
  // What each side would deliver if it never waited for the other: samples_per_s / busy (0 when idle).
  double producer_max_samples_per_s = 0, drafter_max_samples_per_s = 0;
};
BusyReport busy_report(double samples, double seconds, double producer_busy_seconds, double drafter_busy_seconds);
// "target 97% busy, drafters 41% busy: target-bound" (`producer` names the producer side: target or data).
std::string busy_line(const BusyReport& b, const std::string& producer);

class TrainLog {
 public:
  // Resuming at `start_step` drops metrics lines of later steps (written after the checkpoint we resume from).
  TrainLog(const std::string& run_dir, bool enabled, int64_t start_step, int64_t total_steps, int64_t log_every);
  void step(const StepMetrics& m);
  // What the progress line calls the producer side: "target" (online) or "data" (offline).
  void set_producer_name(std::string name) { producer_name_ = std::move(name); }
  void message(const std::string& text);
  // A line of metrics.jsonl that is not a step's (it carries "event" and the step it applies from).
  void event(const nlohmann::json& j);
  void finish(const std::string& text);

 private:
  void clear_bar();
  std::string path_;
  bool enabled_, tty_, bar_shown_ = false;
  int64_t start_step_, total_, every_;
  double window_tokens_ = 0, window_seconds_ = 0;
  double window_samples_ = 0, window_producer_busy_ = 0, window_drafter_busy_ = 0;
  std::string producer_name_ = "target";
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dflash::train
