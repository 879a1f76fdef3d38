// `dflash train`, `dflash export`, `dflash plot` (docs/TRAINING.md).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "checkpoint.h"
#include "python_driver.h"
#include "train_commands.h"
#include "train_config.h"
#include "trainer.h"

namespace fs = std::filesystem;

namespace dflash::train {

using util::Args;

int train_main(const std::vector<std::string>& argv) {
  train::TrainConfig cfg;
  nlohmann::json flags;
  if (!train::parse_train_args(argv, cfg, &flags)) return 0;
  if (cfg.resume) {
    // The run's saved settings, then the --config file and flags given now on top.
    if (cfg.out.empty()) throw std::invalid_argument("train: --resume needs --out RUN_DIR");
    const std::string saved = (fs::path(cfg.out) / "train_config.json").string();
    train::TrainConfig base;
    train::apply_json(base, train::read_config_file(saved), saved);
    base.stop_after = 0;  // a pause applies to the invocation that asked for it
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--config" && i + 1 < argv.size()) {
        train::apply_config_file(base, argv[i + 1]);
        ++i;
      } else if (argv[i].rfind("--config=", 0) == 0) {
        train::apply_config_file(base, argv[i].substr(9));
      }
    }
    train::apply_json(base, flags, "command line");
    cfg = base;
    cfg.resume = true;
  }
  train::install_sigint_handler();
  return train::run_training(cfg);
}

int export_main(const std::vector<std::string>& argv) {
  std::vector<std::string> rest;
  std::string run_dir;
  for (const auto& a : argv) {
    if (run_dir.empty() && a.rfind("--", 0) != 0 && (rest.empty() || rest.back().rfind("--", 0) != 0 || rest.back() == "--help"))
      run_dir = a;
    else
      rest.push_back(a);
  }
  Args a("export", "write a run's latest checkpoint as an HF drafter folder: dflash export RUN_DIR --out DIR");
  a.option("out", "DIR", "", "output folder (config.json + model.safetensors)");
  a.option("dtype", "DTYPE", "", "weights dtype: bf16 | fp32 (default: the drafter config's torch_dtype)");
  if (!a.parse(rest)) return 0;
  if (run_dir.empty()) throw std::invalid_argument("export: RUN_DIR missing (dflash export RUN_DIR --out DIR)");
  if (a.str("out").empty()) throw std::invalid_argument("export: --out DIR is required");
  train::export_run(run_dir, a.str("out"), a.str("dtype"));
  return 0;
}

int plot_main(const std::vector<std::string>& argv) {
  std::vector<std::string> rest;
  std::string run_dir;
  for (const auto& a : argv) (run_dir.empty() && a.rfind("--", 0) != 0) ? (void)(run_dir = a) : rest.push_back(a);
  Args a("plot", "PNG curves of a run's metrics.jsonl: dflash plot RUN_DIR [--out DIR]");
  a.option("out", "DIR", "", "output folder (default RUN_DIR)");
  if (!a.parse(rest)) return 0;
  if (run_dir.empty()) throw std::invalid_argument("plot: RUN_DIR missing (dflash plot RUN_DIR)");
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics)) throw std::invalid_argument("plot: " + metrics + " not found");
  const auto r = util::run_python("plot_metrics.py", {metrics, a.str("out").empty() ? run_dir : a.str("out")});
  std::fputs(r.stdout_text.c_str(), stdout);
  return r.exit_code;
}

}  // namespace dflash::train
