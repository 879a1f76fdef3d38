#include "dspark_proposer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "token_sampler.h"

namespace dflash::eval {

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

DSparkProposer::DSparkProposer(const LoadedDrafter& d, const models::TargetModel& target, int64_t max_draft,
                               ops::AttentionBackend attention, double confidence_threshold)
    : DFlashProposer(d, target, max_draft, attention), confidence_threshold_(confidence_threshold) {
  const std::string where = d.dir + "/config.json";
  if (std::string(d.config.family.name()) != "dspark")
    throw std::invalid_argument(where + ": DSparkProposer needs a dspark drafter (architectures Qwen3DSparkModel)");
  if (d.lm_head.defined())
    throw std::invalid_argument(where + ": field 'draft_vocab_size': expected 0 for a dspark drafter (its Markov "
                                "head is over the target vocabulary)");
  if (confidence_threshold > 0 && !d.config.dspark.enable_confidence_head)
    throw std::invalid_argument("eval: --confidence-threshold needs a confidence head, but " + where +
                                " has enable_confidence_head false");
  heads_ = drafter::dspark_head_weights(d.config.dspark, d.weights.heads);
  const at::Device dev = d.weights.fc.device();
  for (at::Tensor* t : {&heads_.markov_w1, &heads_.markov_w2, &heads_.gate_w, &heads_.gate_b, &heads_.joint_w,
                        &heads_.joint_b, &heads_.conf_w, &heads_.conf_b})
    if (t->defined()) *t = t->to(dev, at::kFloat);
}

std::vector<int64_t> DSparkProposer::propose(int64_t last_token, int64_t pos) {
  std::mt19937_64 unused;
  return draft(last_token, pos, 0.0, unused).tokens;
}

Draft DSparkProposer::draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) {
  const auto& c = d_.config;
  const int64_t B = c.block_size;
  const int64_t n = max_draft() > 0 ? std::min(max_draft(), B) : B;
  const at::Tensor h = block_hidden(last_token, pos).narrow(1, 0, n)[0];  // [n, H]
  // U_j: the target's LM head on every drafted slot, once; the Markov bias is added slot by slot.
  const at::Tensor base = target_.lm_head(h.unsqueeze(0).to(target_.dtype()))[0].to(h.device(), at::kFloat);
  Draft out;
  std::vector<int64_t> prev;  // p_j: the last committed token, then the drafts
  at::Tensor state;           // the rnn head's state (undefined for the other variants: zeros)
  int64_t p = last_token;
  for (int64_t j = 0; j < n; ++j) {
    prev.push_back(p);
    at::Tensor logits = base[j];
    if (c.dspark.markov_rank > 0) {
      const at::Tensor prev_t = at::full({1}, p, at::TensorOptions().dtype(at::kLong).device(h.device()));
      auto [u, next_state] = drafter::markov_step(c.dspark, heads_, h.narrow(0, j, 1), prev_t, state);
      state = next_state;
      logits = logits + drafter::markov_bias(heads_, u)[0];
    }
    int64_t d;
    if (temperature <= 0) {
      d = logits.argmax().item<int64_t>();
    } else {
      out.probs.push_back(data::token_probs(logits.to(at::kCPU), temperature));
      d = data::draw(out.probs.back(), rng);
    }
    out.tokens.push_back(d);
    p = d;
  }
  if (confidence_threshold_ > 0) {
    // Confidence of slot j reads the same previous token as its Markov bias: [last, d_0 .. d_{n-2}].
    const at::Tensor prev_t = at::tensor(prev, at::kLong).to(h.device());
    const at::Tensor conf = drafter::confidence_logits(c.dspark, heads_, h, prev_t).to(at::kCPU, at::kDouble).contiguous();
    const double* cp = conf.data_ptr<double>();
    const int64_t keep = confident_draft_length(std::vector<double>(cp, cp + conf.numel()), confidence_threshold_);
    out.tokens.resize(static_cast<size_t>(keep));
    if (!out.probs.empty()) out.probs.resize(static_cast<size_t>(keep));
  }
  return out;
}

}  // namespace dflash::eval
