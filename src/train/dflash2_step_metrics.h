// What a DFlash2 run reports each log step (docs/DFLASH2.md): the selector loss, unary
// recall@K, the teacher-forced selector accuracy, and the accepted lengths of the path the selector walks fed with
// its own picks and of the unary top-K oracle (not the unary argmax: TorchSpec #177). Torch-free: the progress
// line and metrics.jsonl use it.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dflash::train {

struct DFlash2StepMetrics {
  bool on = false;  // family dflash2
  double selector_loss = 0;
  double recall_at_k = 0;        // rows whose target is in the unary top-K / rows
  double selector_acc = 0;       // rows where the teacher-forced selector picks the target / rows
  double path_accept_len = 0;    // mean over blocks of 1 + the greedy walk's surviving prefix
  double oracle_accept_len = 0;  // mean over blocks of 1 + the prefix whose targets are in the top-K
  double unary_accept_len = 0;   // mean over blocks of 1 + the unary argmax's surviving prefix (DFlash's path)
};

// " sel 1.234 recall@K 0.71 sel-acc 0.55 tau-path 2.31 tau-oracle 3.10" ("" when off).
std::string dflash2_progress_text(const DFlash2StepMetrics& m);
// Adds selector_loss, unary_recall_at_k, teacher_forced_selector_acc, self_conditioned_path_accepted_length,
// unary_top_k_oracle_accepted_length to a metrics.jsonl line (nothing when off).
void add_dflash2_metrics(const DFlash2StepMetrics& m, nlohmann::json& line);

}  // namespace dflash::train
