// `dflash train`, `dflash plot` (docs/TRAINING.md).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "checkpoint.h"
#include "drafter_family_setting.h"
#include "python_driver.h"
#include "train_commands.h"
#include "train_config.h"
#include "trainer.h"

namespace fs = std::filesystem;

namespace dflash::train {

using util::Args;

namespace {

// The test hooks of a whole run, for the Python tests that drive `dflash train` as a process.
TrainHooks hooks_from_environment() {
  TrainHooks h;
  if (const char* f = std::getenv("DFLASH_TEST_FAIL_WORKER")) h.fail_worker = std::atoi(f);
  if (const char* k = std::getenv("DFLASH_TEST_KILL_IN_SAVE")) h.kill_in_save_step = std::atoll(k);
  if (const char* d = std::getenv("DFLASH_TEST_DUMP_RANK_WEIGHTS")) h.dump_rank_weights = std::string(d) == "1";
  return h;
}

}  // namespace

int train_main(const std::vector<std::string>& argv) {
  TrainArgs args;
  if (!read_train_args(argv, args)) return 0;
  TrainConfig cfg = train_config_of(args);  // with --resume: the run's saved settings under these
  resolve_drafter_family(cfg, "train");
  if (cfg.family() != drafter::DrafterFamily::DFlash2)  // dflash2 trains (docs/DFLASH2.md)
    drafter::refuse_unsupported_family("train", cfg.family());
  install_sigint_handler();
  return run_training(cfg, hooks_from_environment());
}

int plot_main(const std::vector<std::string>& argv) {
  Args a("plot", "PNG curves of a run's metrics.jsonl");
  a.positional("RUN_DIR", "the training run folder (train's --out)");
  a.option("out", "DIR", "", "output folder (default RUN_DIR)");
  if (!a.parse(argv)) return 0;
  const std::string run_dir = a.str("RUN_DIR");
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics)) throw std::invalid_argument("plot: " + metrics + " not found");
  const auto r = util::run_python("plot_metrics.py", {metrics, a.str("out").empty() ? run_dir : a.str("out")});
  std::fputs(r.stdout_text.c_str(), stdout);
  return r.exit_code;
}

}  // namespace dflash::train
