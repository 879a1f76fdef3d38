// A one-line progress bar on stderr: done/total, tokens/s and ETA. Redrawn in place on a terminal; on a
// pipe or file a plain line every few seconds so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace dflash::data {

class Progress {
 public:
  // unit: when given ("samples"), the line also shows items per second in that unit.
  Progress(std::string label, int64_t total, int64_t already_done = 0, std::string unit = "");
  // done: items finished in total (including already_done); tokens: tokens produced in this run.
  void update(int64_t done, int64_t tokens, bool force = false);
  void finish();
  double seconds() const;

 private:
  std::string label_, unit_;
  int64_t total_, start_done_, done_ = 0, tokens_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace dflash::data
