#include "dspark_training.h"

#include <cstdio>

#include "dspark_drafter_settings.h"
#include "markov_heads.h"
#include "dspark_block_batch.h"
#include "dspark_loss.h"
#include "family_training.h"

namespace dflash::families {
namespace {

using drafter::DrafterConfig;

class DSparkTraining final : public drafter::FamilyTraining {
 public:
  // DeepSpec's decay exp(-j/gamma) with gamma 4 when the run leaves it unset.
  double unset_gamma() const override { return drafter::kDSparkGamma; }
  void add_loss_options(const nlohmann::json& s, const DrafterConfig&, drafter::DrafterLossOptions& o) const override {
    o.dspark.chunk_rows = drafter::run_setting_int(s, "loss_chunk_rows");
    o.dspark.ce_weight = drafter::run_setting_number(s, "ce_loss_weight");
    o.dspark.l1_weight = drafter::run_setting_number(s, "l1_loss_weight");
    o.dspark.confidence_weight = drafter::run_setting_number(s, "confidence_loss_weight");
  }
  void use_generic_loss_kernels(drafter::DrafterLossOptions& o) const override { o.dspark.fused = false; }
  // DeepSpec divides by sum w + 1e-6: the epsilon once for the whole step, as its all-reduced denominator has it,
  // so one micro-batch in one process is exactly DeepSpec's loss.
  double step_denominator_eps(const drafter::DrafterLossOptions& o) const override { return o.dspark.den_eps; }
  std::vector<std::string> loss_setting_keys() const override {
    return {"ce_loss_weight", "l1_loss_weight", "confidence_loss_weight"};
  }

  drafter::BlockBatch build_blocks(const DrafterConfig& d, const at::Tensor& input_ids, const at::Tensor& loss_mask,
                                   const drafter::AnchorSample& anchors, double gamma) const override {
    return drafter::build_dspark_block_batch(input_ids, loss_mask, anchors, d.block_size, d.mask_token_id, gamma);
  }

  // dspark_loss.h's stats: the term numerators and sum w, tau, accept rates and confidence errors as sums.
  int64_t metric_sums_size(const DrafterConfig& d) const override { return drafter::dspark_stats_size(d.block_size); }
  at::Tensor metric_sums(const DrafterConfig&, const drafter::DrafterLossResult& r) const override {
    return r.family_stats;
  }
  // tau and the L1 loss are shown in the progress line too.
  drafter::FamilyStepMetrics step_metrics(const DrafterConfig& d, const at::Tensor& sums) const override {
    drafter::FamilyStepMetrics m;
    m.named = drafter::dspark_metrics(sums, d.block_size, dspark_settings(d).enable_confidence_head);
    for (const auto& [k, v] : m.named) {
      if (k != "tau_probabilistic" && k != "l1_loss") continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %s %.3f", k == "l1_loss" ? "l1" : "tau", v);
      m.progress += buf;
    }
    return m;
  }
};

}  // namespace

const drafter::FamilyTraining& dspark_training() {
  static const DSparkTraining training;
  return training;
}

}  // namespace dflash::families
