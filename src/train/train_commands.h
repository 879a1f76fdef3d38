// The `dflash` commands of the training layer: train, plot a run's metrics, and the producer benchmark.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::train {

int train_main(const std::vector<std::string>& args);
int plot_main(const std::vector<std::string>& args);
int report_main(const std::vector<std::string>& args);
int bench_producer_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"train"}, "train a DFlash drafter (online target or offline hidden states; docs/TRAINING.md)", &train_main},
      {{"plot"}, "PNG curves (loss, accuracy) of a training run's metrics.jsonl", &plot_main},
      {{"report"}, "replay a training run into TensorBoard, W&B, MLflow or SwanLab (train's report_to, afterwards)",
       &report_main},
      {{"bench", "producer"}, "target replicas and pipelined stages vs one replica / stages in turn (CPU): "
                              "producer samples/s and training steps/s", &bench_producer_main},
  };
}

}  // namespace dflash::train
