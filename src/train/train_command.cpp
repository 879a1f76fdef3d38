// `dflash train`, `dflash plot` (docs/TRAINING.md).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "checkpoint.h"
#include "drafter_family_setting.h"
#include "input_file.h"
#include "output_file.h"
#include "output_folder.h"
#include "python_driver.h"
#include "report_to.h"
#include "run_settings.h"
#include "train_commands.h"
#include "train_config.h"
#include "train_hooks_env.h"
#include "trainer.h"

namespace fs = std::filesystem;

namespace dflash::train {

using util::Args;

int train_main(const std::vector<std::string>& argv) {
  TrainArgs args;
  if (!read_train_args(argv, args)) return 0;
  TrainConfig cfg = train_config_of(args);  // with --resume: the run's saved settings under these
  validate_run_settings(cfg, "train");      // what doctor --config reads a config through too
  install_sigint_handler();
  return run_training(cfg, hooks_from_environment());
}

int plot_main(const std::vector<std::string>& argv) {
  Args a("plot", "PNG curves of a run's metrics.jsonl");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("out", "DIR", "", "output folder (default RUN_DIR)");
  a.option("json", "FILE", "", "also write every plotted series (steps and values per PNG) to FILE");
  if (!a.parse(argv)) return 0;
  const std::string run_dir = a.str("RUN_DIR");
  if (a.given("out")) util::check_output_folder_use(a.str("out"), "plot: --out", util::OutputFolderUse::Plots);  // before the script runs
  if (a.given("json")) util::check_output_path(a.str("json"), "plot: --json");
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics)) throw std::invalid_argument("plot: " + metrics + " not found");
  io::require_regular_file(metrics);  // a folder or FIFO: one line here; its lines are checked by the script
  std::vector<std::string> script_args = {metrics, a.str("out").empty() ? run_dir : a.str("out")};
  if (a.given("json")) script_args.push_back(a.str("json"));
  const auto r = util::run_python("plot_metrics.py", script_args);
  std::fputs(r.stdout_text.c_str(), stdout);
  return r.exit_code;
}

int report_main(const std::vector<std::string>& argv) {
  Args a("report", "replay a training run's metrics.jsonl, settings and plots into experiment trackers");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("to", "LIST", "", std::string("the trackers: ") + kReportToSpellings + " (required)");
  // The train settings that say where and under which names the trackers file the run, spelt as for train;
  // not given: the run's own (its train_config.json), else their defaults.
  const std::vector<std::string> keys = {"report_project", "report_run_name", "tensorboard_dir", "wandb_mode",
                                         "wandb_dir", "mlflow_tracking_uri", "swanlab_mode", "swanlab_logdir"};
  auto flag = [](std::string key) {
    for (char& ch : key)
      if (ch == '_') ch = '-';
    return key;
  };
  for (const auto& key : keys)
    for (const auto& f : train_fields())
      if (f.key == key) a.option(flag(key), "VALUE", "", f.help + " [the run's]");
  if (!a.parse(argv)) return 0;
  const std::string run_dir = a.str("RUN_DIR");
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics)) throw std::invalid_argument("report: " + metrics + " not found");
  const auto to = report_to_from_text(a.str("to"));
  if (!to || !to->any())
    throw util::UsageError(std::string("report: --to must be a comma list of tensorboard, wandb, mlflow, swanlab ") +
                           "(each once), got '" + a.str("to") + "'");
  nlohmann::json settings = {{"report_to", to->text()}};
  for (const auto& key : keys)
    if (a.given(flag(key))) settings[key] = a.str(flag(key));
  TrainConfig checked;
  apply_json(checked, settings, "report: command line");
  checked.validate_report_settings();
  const auto r = util::run_python("report.py", {"replay", run_dir, "--settings", settings.dump()});
  std::fputs(r.stdout_text.c_str(), stdout);
  return r.exit_code;
}

}  // namespace dflash::train
