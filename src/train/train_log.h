// What the user sees during training: a one-line bar on a terminal (step, loss, slot accuracy, tokens/s,
// ETA, RSS), plain lines otherwise, and RUN_DIR/metrics.jsonl (one JSON object per log step, plus event lines
// such as the attention backend chosen before step 1).
// Only the lead process (rank 0) writes.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dflash::train {

struct StepMetrics {
  int64_t step = 0;  // steps done, 1-based
  double loss = 0, acc = 0, lr = 0, grad_norm = 0, tokens = 0, step_seconds = 0;
  std::vector<double> slot_acc;
  double out_of_vocab = -1;  // draft vocabulary: fraction of loss rows whose target it lacks (-1: full vocabulary)
};

class TrainLog {
 public:
  // Resuming at `start_step` drops metrics lines of later steps (written after the checkpoint we resume from).
  TrainLog(const std::string& run_dir, bool enabled, int64_t start_step, int64_t total_steps, int64_t log_every);
  void step(const StepMetrics& m);
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
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dflash::train
