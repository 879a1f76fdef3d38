// The `dflash` commands of the training layer: train, export a run, plot its metrics, and `doctor`, which checks a
// machine (and a train config) before training.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::train {

int train_main(const std::vector<std::string>& args);
int export_main(const std::vector<std::string>& args);
int plot_main(const std::vector<std::string>& args);
int bench_producer_main(const std::vector<std::string>& args);
int doctor_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"doctor"}, "check this machine first: versions, devices, the kernels against their references, speed, "
                   "collectives; --config: a run's shapes and memory plan (docs/DOCTOR.md)", &doctor_main},
      {{"train"}, "train a DFlash drafter (online target or offline hidden states; docs/TRAINING.md)", &train_main},
      {{"export"}, "write a training run's latest checkpoint as an HF drafter folder", &export_main},
      {{"plot"}, "PNG curves (loss, accuracy) of a training run's metrics.jsonl", &plot_main},
      {{"bench", "producer"}, "target replicas and pipelined stages vs one replica / stages in turn (CPU): "
                              "producer samples/s and training steps/s", &bench_producer_main},
  };
}

}  // namespace dflash::train
