#include "dflash2_training.h"

#include <cstdio>
#include <stdexcept>

#include <ATen/ATen.h>

#include "dflash2_drafter_settings.h"
#include "dflash2_objective.h"
#include "dflash2_settings.h"
#include "family_training.h"

namespace dflash::families {
namespace {

using drafter::DrafterConfig;

// The metric sums' layout: the selector's row sums, then its block sums.
enum Sum : int64_t {
  kCeSum, kWeight, kRows, kRecallHits, kSelectorHits, kBlocks, kPathLengthSum, kOracleLengthSum, kUnaryLengthSum,
  kSums
};

class DFlash2Training final : public drafter::FamilyTraining {
 public:
  void add_loss_options(const nlohmann::json& s, const DrafterConfig& d, drafter::DrafterLossOptions& o) const override {
    o.dflash2.selector_weight = drafter::run_setting_number(s, "selector_loss_weight");
    add_drafter_loss_options(d, o);
    const std::string candidates = drafter::run_setting_text(s, "selector_candidates");
    const auto c = drafter::selector_candidates_from_text(candidates);
    if (!c) throw std::logic_error("train settings: selector_candidates '" + candidates + "' was not validated");
    o.dflash2.selector.candidates = *c;
    o.dflash2.selector.stop_gradient = drafter::run_setting_bool(s, "selector_stop_gradient");
  }
  std::vector<std::string> loss_setting_keys() const override { return {"selector_loss_weight"}; }
  void add_drafter_loss_options(const DrafterConfig& d, drafter::DrafterLossOptions& o) const override {
    o.dflash2.selector.top_k = dflash2_settings(d).selector_top_k;
  }

  int64_t metric_sums_size(const DrafterConfig&) const override { return kSums; }
  at::Tensor metric_sums(const DrafterConfig&, const drafter::DrafterLossResult& r) const override {
    if (!r.dflash2.defined()) return {};
    const auto& t = r.dflash2.terms;
    const auto& b = r.dflash2.blocks;
    return at::stack({t.ce_sum.detach().to(at::kDouble), t.weight.to(at::kDouble), t.rows.to(at::kDouble),
                      t.recall_hits.to(at::kDouble), t.selector_hits.to(at::kDouble), b.blocks.to(at::kDouble),
                      b.path_length_sum.to(at::kDouble), b.oracle_length_sum.to(at::kDouble),
                      b.unary_length_sum.to(at::kDouble)})
        .to(at::kCPU);
  }
  drafter::FamilyStepMetrics step_metrics(const DrafterConfig&, const at::Tensor& sums) const override {
    const at::Tensor v = sums.to(at::kCPU, at::kDouble).contiguous();
    const double* x = v.data_ptr<double>();
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    // The selector loss is the trained term: sum w m CE over the unary sum w, as the loss has it.
    const double selector_loss = ratio(x[kCeSum], x[kWeight]), recall = ratio(x[kRecallHits], x[kRows]),
                 selector_acc = ratio(x[kSelectorHits], x[kRows]), path = ratio(x[kPathLengthSum], x[kBlocks]),
                 oracle = ratio(x[kOracleLengthSum], x[kBlocks]), unary = ratio(x[kUnaryLengthSum], x[kBlocks]);
    drafter::FamilyStepMetrics m;
    m.named = {{"selector_loss", selector_loss},
               {"unary_recall_at_k", recall},
               {"teacher_forced_selector_acc", selector_acc},
               {"self_conditioned_path_accepted_length", path},
               {"unary_top_k_oracle_accepted_length", oracle},
               {"unary_path_accepted_length", unary}};
    char buf[160];
    std::snprintf(buf, sizeof buf, "  sel %.4f recall@K %.3f sel-acc %.3f tau-path %.3f tau-oracle %.3f", selector_loss,
                  recall, selector_acc, path, oracle);
    m.progress = buf;
    return m;
  }
};

}  // namespace

const drafter::FamilyTraining& dflash2_training() {
  static const DFlash2Training training;
  return training;
}

}  // namespace dflash::families
