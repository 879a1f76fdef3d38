#include "dspark_heads.h"

#include <stdexcept>

#include <ATen/ATen.h>

namespace dflash::drafter {

const char* const kMarkovW1 = "markov_head.markov_w1.weight";
const char* const kMarkovW2 = "markov_head.markov_w2.weight";
const char* const kMarkovGateW = "markov_head.gate_proj.weight";
const char* const kMarkovGateB = "markov_head.gate_proj.bias";
const char* const kMarkovJointW = "markov_head.joint_proj.weight";
const char* const kMarkovJointB = "markov_head.joint_proj.bias";
const char* const kConfidenceW = "confidence_head.proj.weight";
const char* const kConfidenceB = "confidence_head.proj.bias";

std::vector<std::pair<std::string, std::vector<int64_t>>> dspark_head_shapes(const DSparkHeads& h, int64_t V,
                                                                             int64_t d) {
  const int64_t r = h.markov_rank;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  if (r > 0) {
    out.push_back({kMarkovW1, {V, r}});
    out.push_back({kMarkovW2, {V, r}});
    if (h.markov_head_type == MarkovHeadType::Gated) {
      out.push_back({kMarkovGateW, {r, d + r}});
      out.push_back({kMarkovGateB, {r}});
    } else if (h.markov_head_type == MarkovHeadType::Rnn) {
      out.push_back({kMarkovJointW, {3 * r, 2 * r + d}});
      out.push_back({kMarkovJointB, {3 * r}});
    }
  }
  if (h.enable_confidence_head) {
    out.push_back({kConfidenceW, {1, d + (h.confidence_head_with_markov ? r : 0)}});
    out.push_back({kConfidenceB, {1}});
  }
  return out;
}

DSparkHeadWeights dspark_head_weights(const DSparkHeads& h,
                                      const std::vector<std::pair<std::string, at::Tensor>>& named) {
  auto find = [&](const char* name) -> at::Tensor {
    for (const auto& [n, t] : named)
      if (n == name) return t;
    throw std::invalid_argument(std::string("dspark heads: tensor '") + name + "' is missing");
  };
  DSparkHeadWeights w;
  for (const auto& [name, shape] : dspark_head_shapes(h, 0, 0)) {
    at::Tensor t = find(name.c_str());
    if (name == kMarkovW1) w.markov_w1 = t;
    else if (name == kMarkovW2) w.markov_w2 = t;
    else if (name == kMarkovGateW) w.gate_w = t;
    else if (name == kMarkovGateB) w.gate_b = t;
    else if (name == kMarkovJointW) w.joint_w = t;
    else if (name == kMarkovJointB) w.joint_b = t;
    else if (name == kConfidenceW) w.conf_w = t;
    else if (name == kConfidenceB) w.conf_b = t;
  }
  return w;
}

namespace {

void check_prev(const at::Tensor& hidden, const at::Tensor& prev, const char* what) {
  if (prev.scalar_type() != at::kLong || prev.dim() + 1 != hidden.dim() ||
      prev.sizes() != hidden.sizes().slice(0, size_t(hidden.dim() - 1)))
    throw std::invalid_argument(std::string(what) + ": prev must be int64 with the shape of hidden less its last dim");
}

// (the sigmoid gate, the candidate, the output) of the rnn cell for its precomputed input part z_in
// (= Wj[:, r:] [W1[p]; h] + bj) and state s.
at::Tensor rnn_update(const at::Tensor& z_in, const at::Tensor& state, const at::Tensor& w_state, int64_t r,
                      at::Tensor& new_state) {
  const at::Tensor z = state.defined() ? z_in + at::linear(state, w_state) : z_in;
  const auto parts = z.split(r, -1);
  const at::Tensor g = at::sigmoid(parts[0]);
  const at::Tensor cand = at::tanh(parts[1]);
  new_state = state.defined() ? g * state + (1 - g) * cand : (1 - g) * cand;
  return at::tanh(parts[2]);
}

}  // namespace

at::Tensor markov_features(const DSparkHeads& h, const DSparkHeadWeights& w, const at::Tensor& hidden,
                           const at::Tensor& prev) {
  if (h.markov_rank == 0) return {};
  check_prev(hidden, prev, "markov_features");
  const int64_t r = h.markov_rank;
  const at::Tensor e = at::embedding(w.markov_w1, prev).to(hidden.scalar_type());  // [..., B, r]
  switch (h.markov_head_type) {
    case MarkovHeadType::Vanilla: return e;
    case MarkovHeadType::Gated: return at::sigmoid(at::linear(at::cat({hidden, e}, -1), w.gate_w, w.gate_b)) * e;
    case MarkovHeadType::Rnn: break;
  }
  // The input part of every slot at once; only the state product runs slot by slot.
  const at::Tensor w_state = w.joint_w.narrow(1, 0, r);
  const at::Tensor z_in = at::linear(at::cat({e, hidden}, -1), w.joint_w.narrow(1, r, r + hidden.size(-1)), w.joint_b);
  const int64_t B = hidden.size(-2);
  std::vector<at::Tensor> out;
  at::Tensor state;
  for (int64_t j = 0; j < B; ++j) {
    at::Tensor next;
    out.push_back(rnn_update(z_in.select(-2, j), state, w_state, r, next));
    state = next;
  }
  return at::stack(out, -2);
}

std::pair<at::Tensor, at::Tensor> markov_step(const DSparkHeads& h, const DSparkHeadWeights& w,
                                              const at::Tensor& hidden, const at::Tensor& prev,
                                              const at::Tensor& state) {
  if (h.markov_rank == 0) return {};
  if (h.markov_head_type != MarkovHeadType::Rnn)
    return {markov_features(h, w, hidden.unsqueeze(-2), prev.unsqueeze(-1)).squeeze(-2), at::Tensor()};
  check_prev(hidden, prev, "markov_step");
  const int64_t r = h.markov_rank;
  const at::Tensor e = at::embedding(w.markov_w1, prev).to(hidden.scalar_type());
  const at::Tensor z_in = at::linear(at::cat({e, hidden}, -1), w.joint_w.narrow(1, r, r + hidden.size(-1)), w.joint_b);
  at::Tensor next;
  at::Tensor u = rnn_update(z_in, state, w.joint_w.narrow(1, 0, r), r, next);
  return {u, next};
}

at::Tensor markov_bias(const DSparkHeadWeights& w, const at::Tensor& features) {
  return at::linear(features, w.markov_w2.to(features.scalar_type()));
}

at::Tensor confidence_logits(const DSparkHeads& h, const DSparkHeadWeights& w, const at::Tensor& hidden,
                             const at::Tensor& prev) {
  if (!h.enable_confidence_head) return {};
  check_prev(hidden, prev, "confidence_logits");
  at::Tensor x = hidden;
  if (h.confidence_head_with_markov && h.markov_rank > 0)
    x = at::cat({hidden, at::embedding(w.markov_w1, prev).to(hidden.scalar_type())}, -1);
  return at::linear(x, w.conf_w, w.conf_b).squeeze(-1);
}

}  // namespace dflash::drafter
