#include "dspark_model_hooks.h"

#include <stdexcept>
#include <utility>

#include "args.h"
#include "dspark_block_batch.h"
#include "dspark_drafter_settings.h"
#include "dspark_drafting.h"
#include "dspark_heads.h"
#include "dspark_loss.h"
#include "dspark_objective_bench.h"
#include "dspark_training.h"
#include "family_model.h"

namespace dflash::families {
namespace {

using namespace drafter;

class DSparkModel final : public FamilyModel {
 public:
  void add_weight_shapes(const DrafterConfig& c, WeightShapes& out) const override {
    // Typed by dspark_head_weights() where they are read; w.heads keeps them by name.
    for (auto& s : dspark_head_shapes(dspark_settings(c), c.vocab_size, c.hidden_size)) out.push_back(std::move(s));
  }

  at::Tensor objective(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                       const at::Tensor& target_last_hidden, const AnchorSample& anchors, const BlockBatch& blocks,
                       const DrafterLossOptions& opt, DrafterLossResult& r) const override {
    DSparkObjective o = dspark_objective(c, w, t.lm_head, r.hidden, target_last_hidden, anchors.keep, blocks,
                                         opt.dspark);
    r.loss = o.loss;
    r.family_stats = o.stats;
    r.loss_eps = opt.dspark.den_eps;  // DeepSpec's denominator epsilon (drafter_model.h DrafterLossResult)
    return o.row_correct;
  }

  const drafter::FamilyTraining* training() const override { return &dspark_training(); }  // dspark_training.cpp
  const drafter::FamilyDrafting* drafting() const override { return &dspark_drafting(); }  // dspark_drafting.cpp

  void check_selftest(const DrafterLossOptions& opt, bool has_last_hidden, const std::string& batch) const override {
    if (opt.chunk.kl_weight != 0)
      throw util::UsageError("drafter selftest: --kl-weight must be 0 for a DSpark drafter (its teacher is the L1 term)");
    if (!has_last_hidden)
      throw std::invalid_argument(batch + ": no target_last_hidden (a DSpark drafter's objective needs the "
                                  "target's last hidden states [b, S, H])");
  }

  // --- bench step: the objective's own benchmark (dspark_objective_bench.cpp) ---
  nlohmann::json benchmark_objective(const ObjectiveBenchSetup& s) const override { return compare_dspark_objective(s); }
};

}  // namespace

const FamilyModel& dspark_model() {
  static const DSparkModel model;
  return model;
}

}  // namespace dflash::families
