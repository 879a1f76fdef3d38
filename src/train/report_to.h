// `report_to`: the experiment trackers a run's metrics are forwarded to while it trains (docs/TRAINING.md,
// "Following a run in TensorBoard, W&B, MLflow or SwanLab"). Written "none" or a comma list such as
// "tensorboard,wandb"; read once into this list, each tracker named once. Torch-free.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace dflash::train {

inline constexpr const char* kReportToSpellings = "none or a comma list of tensorboard, wandb, mlflow, swanlab";

struct ReportTo {
  std::vector<std::string> trackers;  // in the order given; empty: none
  bool any() const { return !trackers.empty(); }
  std::string text() const;  // "none" or "tensorboard,wandb"
  bool operator==(const ReportTo& o) const { return trackers == o.trackers; }
};

// "" and "none" are no tracker; an unknown name, an empty item or a name given twice is nullopt.
std::optional<ReportTo> report_to_from_text(const std::string& text);

}  // namespace dflash::train
