#include "dspark_loss.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/ATen.h>

#include "dspark_block_batch.h"
#include "dspark_drafter_settings.h"
#include "dspark_heads.h"

namespace dflash::drafter {

at::Tensor dspark_metric_sums(const at::Tensor& accept_in, const at::Tensor& weights_in, const at::Tensor& conf,
                              const at::Tensor& keep_in) {
  const at::Tensor accept = accept_in.to(at::kCPU, at::kDouble), w = weights_in.to(at::kCPU, at::kDouble);
  const at::Tensor keep = keep_in.to(at::kCPU).to(at::kBool).reshape({-1});
  const int64_t B = accept.size(1);
  at::Tensor out = at::zeros({dspark_stats_size(B)}, at::kDouble);
  const at::Tensor m = w.gt(0).to(at::kDouble), am = accept * m;
  const at::Tensor valid = keep & m.sum(-1).gt(0);
  out[kStatTau] = ((1 + am.cumprod(-1).sum(-1)) * valid.to(at::kDouble)).sum();
  out[kStatBlocks] = valid.sum().to(at::kDouble);
  out.narrow(0, kStatSlots, B).copy_(am.sum(0));
  out.narrow(0, kStatSlots + B, B).copy_(m.sum(0));
  if (conf.defined()) {
    const at::Tensor s = at::sigmoid(conf.to(at::kCPU, at::kDouble).reshape({-1, B}));
    out[kStatConfAbs] = (w * (s - accept).abs()).sum();
    out[kStatConfBias] = (w * (s - accept)).sum();
    out[kStatConfCum] = (w * ((s * m).cumprod(-1) - am.cumprod(-1))).sum();
    out[kStatConfDen] = w.sum();
  }
  return out;
}

DSparkObjective dspark_objective(const DrafterConfig& c, const DrafterWeights& w, const at::Tensor& lm_head,
                                 const at::Tensor& hidden, const at::Tensor& target_last_hidden,
                                 const at::Tensor& keep, const BlockBatch& blocks, const ops::DSparkLossOptions& opt) {
  const int64_t H = c.hidden_size, B = c.block_size, b = hidden.size(0);
  const DSparkHeads& heads = families::dspark_settings(c);
  const bool needs_teacher = opt.l1_weight > 0 || heads.enable_confidence_head;
  if (needs_teacher && !target_last_hidden.defined())
    throw std::invalid_argument("drafter_family dspark: the L1 term and the confidence head need the target's last "
                                "hidden states (online: the target pass; offline: shards dumped with them)");
  const DSparkHeadWeights hw = dspark_head_weights(heads, w.heads);
  const at::Tensor prev = dspark_prev_tokens(blocks, B).reshape({b, -1, B});
  const at::Tensor h4 = hidden.reshape({b, -1, B, H});
  const at::Tensor u = markov_features(heads, hw, h4, prev);
  const at::Tensor conf = confidence_logits(heads, hw, h4, prev);
  const bool teacher = target_last_hidden.defined();
  const ops::DSparkLossOutputs o = ops::dspark_lm_loss(
      hidden.reshape({-1, H}), lm_head, blocks.labels.reshape({-1}), blocks.weights.reshape({-1}),
      u.defined() ? u.reshape({-1, heads.markov_rank}) : at::Tensor(), u.defined() ? hw.markov_w2 : at::Tensor(),
      teacher ? target_last_hidden.reshape({-1, H}) : at::Tensor(), teacher ? blocks.teacher_index.reshape({-1}) : at::Tensor(),
      conf.defined() ? conf.reshape({-1}) : at::Tensor(), opt);
  DSparkObjective r;
  r.loss = o.loss;
  r.row_correct = o.row_correct;
  const at::Tensor wrows = blocks.weights.reshape({-1, B});
  r.stats = dspark_metric_sums(o.row_accept.reshape({-1, B}), wrows, conf.defined() ? conf.detach() : at::Tensor(), keep);
  // Each term's numerator (the op divided by sum w + eps), and sum w alone: DeepSpec logs num / den without the
  // epsilon, and sums without it add up across micro-batches.
  const double wsum = wrows.sum().item<double>();
  r.stats.narrow(0, kStatCe, 3).copy_(o.terms.to(at::kCPU, at::kDouble) * (wsum + opt.den_eps));
  r.stats[kStatDen] = wsum;
  return r;
}

std::vector<std::pair<std::string, double>> dspark_metrics(const at::Tensor& stats_in, int64_t B, bool confidence_head) {
  const at::Tensor s = stats_in.to(at::kCPU, at::kDouble);
  auto at_ = [&](int64_t i) { return s[i].item<double>(); };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN(); };
  std::vector<std::pair<std::string, double>> out = {
      {"ce_loss", ratio(at_(kStatCe), at_(kStatDen))},
      {"l1_loss", ratio(at_(kStatL1), at_(kStatDen))},
      {"confidence_loss", ratio(at_(kStatConf), at_(kStatDen))},
      {"tau_probabilistic", ratio(at_(kStatTau), at_(kStatBlocks))}};
  for (int64_t j = 0; j < B; ++j)
    out.emplace_back("accept_rate@" + std::to_string(j), ratio(at_(kStatSlots + j), at_(kStatSlots + B + j)));
  if (confidence_head) {
    out.emplace_back("confidence_abs_error", ratio(at_(kStatConfAbs), at_(kStatConfDen)));
    out.emplace_back("confidence_bias", ratio(at_(kStatConfBias), at_(kStatConfDen)));
    out.emplace_back("confidence_cumprod_bias", ratio(at_(kStatConfCum), at_(kStatConfDen)));
  }
  return out;
}

}  // namespace dflash::drafter
