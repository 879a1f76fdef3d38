#include "run_reporter.h"

#include <filesystem>
#include <fstream>

#include "python_child.h"
#include "train_log.h"

namespace fs = std::filesystem;

namespace dflash::train {
namespace {

// How long the end of a run waits for the trackers to take the last lines (a tracker that hangs is left running:
// it finishes on its own).
constexpr double kFinishSeconds = 120;

}  // namespace

RunReporter::RunReporter(const TrainConfig& cfg, bool lead, TrainLog& log) : run_dir_(cfg.out), log_(log) {
  if (!lead || !cfg.report_to.any()) return;
  child_ = std::make_unique<util::PythonChild>("report.py", std::vector<std::string>{"follow", cfg.out});
  if (child_->started()) return;
  const std::string line = "report: the reporter could not start (" + child_->error() +
                           "); training goes on without " + cfg.report_to.text();
  log_.message(line);
  std::error_code ec;
  fs::create_directories(fs::path(cfg.out) / "report", ec);
  std::ofstream(fs::path(cfg.out) / "report" / "report.log", std::ios::app) << line << "\n";
  child_.reset();
}

RunReporter::~RunReporter() {
  if (child_) finish("failed");
}

void RunReporter::finish(const std::string& how) {
  if (!child_) return;
  const int rc = child_->finish(how, kFinishSeconds);
  child_.reset();
  const std::string log_file = (fs::path(run_dir_) / "report" / "report.log").string();
  if (rc < 0)
    log_.message("report: the trackers are still writing after " + std::to_string(int(kFinishSeconds)) +
                 " s; left to finish in the background (" + log_file + ")");
  else if (rc != 0)
    log_.message("report: the reporter exited with status " + std::to_string(rc) + " (" + log_file + ")");
}

}  // namespace dflash::train
