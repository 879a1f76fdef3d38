#include "dflash2_step_metrics.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace dflash::train {

std::string dflash2_progress_text(const DFlash2StepMetrics& m) {
  if (!m.on) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, " sel %.4f recall@K %.3f sel-acc %.3f tau-path %.3f tau-oracle %.3f", m.selector_loss,
                m.recall_at_k, m.selector_acc, m.path_accept_len, m.oracle_accept_len);
  return buf;
}

void add_dflash2_metrics(const DFlash2StepMetrics& m, nlohmann::json& line) {
  if (!m.on) return;
  line["selector_loss"] = m.selector_loss;
  line["unary_recall_at_k"] = m.recall_at_k;
  line["teacher_forced_selector_acc"] = m.selector_acc;
  line["self_conditioned_path_accepted_length"] = m.path_accept_len;
  line["unary_top_k_oracle_accepted_length"] = m.oracle_accept_len;
  line["unary_path_accepted_length"] = m.unary_accept_len;
}

}  // namespace dflash::train
