// The reporter beside a training run (report_to): a process of the dflash Python package
// (python/dflash/report, started through python/cli_scripts/report.py) that follows RUN_DIR/metrics.jsonl and
// RUN_DIR/checkpoints and forwards them to the trackers named in train_config.json. Training never waits on it: it
// is started once the run folder has its settings and metrics file, and only the end of the run gives it a bounded
// time to finish. A reporter that cannot start is said once on stderr and in RUN_DIR/report/report.log.
#pragma once
#include <memory>
#include <string>

#include "train_config.h"

namespace dflash::util {
class PythonChild;
}

namespace dflash::train {

class TrainLog;

class RunReporter {
 public:
  // Starts nothing unless `lead` and cfg.report_to names a tracker.
  RunReporter(const TrainConfig& cfg, bool lead, TrainLog& log);
  ~RunReporter();  // a run left by an error: finish("failed")
  RunReporter(const RunReporter&) = delete;
  RunReporter& operator=(const RunReporter&) = delete;
  // How the run ended ("done", "interrupted", "failed"); waits a bounded time for the trackers to write the rest.
  void finish(const std::string& how);

 private:
  std::string run_dir_;
  TrainLog& log_;
  std::unique_ptr<util::PythonChild> child_;
};

}  // namespace dflash::train
