// `eval --drafter RUN_DIR` on a training run that reports to experiment trackers (report_to in its
// train_config.json): the results go to the same tracker runs, as eval/<dataset>/<metric> at the step of the run's
// latest checkpoint (python/dflash/report). A tracker's failure is said, never an eval error. Torch-free.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dflash::eval {

// Does nothing unless `drafter` is a run folder whose train_config.json names trackers.
void report_eval_to_trackers(const std::string& drafter, const nlohmann::json& results);

}  // namespace dflash::eval
