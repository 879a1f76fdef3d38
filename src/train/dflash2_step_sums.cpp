#include "dflash2_step_sums.h"

#include <ATen/ATen.h>

namespace dflash::train {

at::Tensor dflash2_sums(const drafter::DFlash2Stats& s) {
  const auto& t = s.terms;
  const auto& b = s.blocks;
  return at::stack({t.ce_sum.detach().to(at::kDouble), t.weight.to(at::kDouble), t.rows.to(at::kDouble),
                    t.recall_hits.to(at::kDouble), t.selector_hits.to(at::kDouble), b.blocks.to(at::kDouble),
                    b.path_length_sum.to(at::kDouble), b.oracle_length_sum.to(at::kDouble),
                    b.unary_length_sum.to(at::kDouble)})
      .to(at::kCPU);
}

DFlash2StepMetrics dflash2_metrics_of(const at::Tensor& sums) {
  const at::Tensor v = sums.to(at::kCPU, at::kDouble).contiguous();
  const double* x = v.data_ptr<double>();
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  DFlash2StepMetrics m;
  m.on = true;
  m.selector_loss = ratio(x[0], x[1]);  // the trained term: sum w m CE over the unary sum w, as the loss has it
  m.recall_at_k = ratio(x[3], x[2]);
  m.selector_acc = ratio(x[4], x[2]);
  m.path_accept_len = ratio(x[6], x[5]);
  m.oracle_accept_len = ratio(x[7], x[5]);
  m.unary_accept_len = ratio(x[8], x[5]);
  return m;
}

}  // namespace dflash::train
