#include "dspark_drafting.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "dspark_drafter_settings.h"
#include "dspark_heads.h"
#include "family_drafting.h"

namespace dflash::families {

int64_t confident_draft_length(const std::vector<double>& confidence_logits, double threshold) {
  const auto n = static_cast<int64_t>(confidence_logits.size());
  if (!(threshold > 0)) return n;
  double product = 1;
  for (int64_t j = 0; j < n; ++j) {
    product *= 1.0 / (1.0 + std::exp(-confidence_logits[static_cast<size_t>(j)]));
    if (product < threshold) return j;
  }
  return n;
}

namespace {

using namespace drafter;

class DSparkBlockDrafter final : public BlockDrafter {
 public:
  DSparkBlockDrafter(const DrafterConfig& c, const DrafterWeights& w, double confidence_threshold)
      : heads_config_(dspark_settings(c)), confidence_threshold_(confidence_threshold) {
    heads_ = dspark_head_weights(dspark_settings(c), w.heads);
    const at::Device dev = w.fc.device();
    for (at::Tensor* t : {&heads_.markov_w1, &heads_.markov_w2, &heads_.gate_w, &heads_.gate_b, &heads_.joint_w,
                          &heads_.joint_b, &heads_.conf_w, &heads_.conf_b})
      if (t->defined()) *t = t->to(dev, at::kFloat);
  }

  BlockDraft draft(const DraftBlock& b, const DraftSampling& s) const override {
    const int64_t n = b.drafts;
    const at::Tensor h = b.hidden.narrow(0, 0, n);  // [n, H]: every slot is a draft
    // U_j: the target's LM head on every drafted slot, once; the Markov bias is added slot by slot.
    const at::Tensor base = b.lm_head(h.unsqueeze(0))[0].to(h.device(), at::kFloat);
    BlockDraft out;
    std::vector<int64_t> prev;  // p_j: the last committed token, then the drafts
    at::Tensor state;           // the rnn head's state (undefined for the other variants: zeros)
    int64_t p = b.last_token;
    for (int64_t j = 0; j < n; ++j) {
      prev.push_back(p);
      at::Tensor logits = base[j];
      if (heads_config_.markov_rank > 0) {
        const at::Tensor prev_t = at::full({1}, p, at::TensorOptions().dtype(at::kLong).device(h.device()));
        auto [u, next_state] = markov_step(heads_config_, heads_, h.narrow(0, j, 1), prev_t, state);
        state = next_state;
        logits = logits + markov_bias(heads_, u)[0];
      }
      int64_t d;
      if (s.temperature <= 0) {
        d = logits.argmax().item<int64_t>();
      } else {
        out.probs.push_back(s.probs(logits.to(at::kCPU)));
        d = s.draw(out.probs.back());
      }
      out.tokens.push_back(d);
      p = d;
    }
    if (confidence_threshold_ > 0) {
      // Confidence of slot j reads the same previous token as its Markov bias: [last, d_0 .. d_{n-2}].
      const at::Tensor prev_t = at::tensor(prev, at::kLong).to(h.device());
      const at::Tensor conf =
          confidence_logits(heads_config_, heads_, h, prev_t).to(at::kCPU, at::kDouble).contiguous();
      const double* cp = conf.data_ptr<double>();
      const int64_t keep = confident_draft_length(std::vector<double>(cp, cp + conf.numel()), confidence_threshold_);
      out.tokens.resize(static_cast<size_t>(keep));
      if (!out.probs.empty()) out.probs.resize(static_cast<size_t>(keep));
    }
    return out;
  }

 private:
  DSparkHeads heads_config_;
  DSparkHeadWeights heads_;  // float32 on the drafter's device
  double confidence_threshold_ = 0;
};

class DSparkDrafting final : public FamilyDrafting {
 public:
  void check(const DrafterConfig& c, const DraftingOptions& o, const std::string& where) const override {
    if (o.confidence_threshold > 0 && !dspark_settings(c).enable_confidence_head)
      throw std::invalid_argument("eval: --confidence-threshold needs a confidence head, but " + where +
                                  " has enable_confidence_head false");
    if (c.draft_vocab_size > 0)
      throw std::invalid_argument(where + ": field 'draft_vocab_size': expected 0 for a dspark drafter (its Markov "
                                  "head is over the target vocabulary)");
  }

  std::unique_ptr<BlockDrafter> make(const DrafterConfig& c, const DrafterWeights& w, const DraftingOptions& o,
                                     const std::string& where) const override {
    check(c, o, where);
    return std::make_unique<DSparkBlockDrafter>(c, w, o.confidence_threshold);
  }
};

}  // namespace

const FamilyDrafting& dspark_drafting() {
  static const DSparkDrafting drafting;
  return drafting;
}

}  // namespace dflash::families
