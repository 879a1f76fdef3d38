#include "moe_weights.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace dflash::models {

namespace {

// The first per-expert tensor the layer holds ("" when none).
std::string first_per_expert(int64_t E, const std::function<bool(const std::string&)>& has) {
  for (int64_t e = 0; e < E; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string s = "mlp.experts." + std::to_string(e) + "." + proj + ".weight";
      if (has(s)) return s;
    }
  return "";
}

}  // namespace

MoeWeights load_moe_weights(const TargetConfig& c,
                            const std::function<at::Tensor(const std::string&, std::vector<int64_t>)>& load,
                            const std::function<bool(const std::string&)>& has,
                            const std::function<std::string(const std::string&)>& name) {
  const MoeConfig& m = c.moe;
  const int64_t E = m.num_experts, H = c.hidden_size, I = m.expert_intermediate;
  MoeWeights w;
  w.router = load("mlp.gate.weight", {E, H});
  const std::string fused = has("mlp.experts.gate_up_proj") ? "mlp.experts.gate_up_proj"
                            : has("mlp.experts.down_proj")  ? "mlp.experts.down_proj"
                                                            : "";
  if (const std::string per = first_per_expert(E, has); !fused.empty() && !per.empty())
    throw std::runtime_error("target weights: the experts are stored twice: fused '" + name(fused) + "' and per expert '" +
                             name(per) + "' (two encodings of the same weights; keep one)");
  if (!fused.empty()) {  // transformers' fused layout: gate rows then up rows per expert
    w.gate_up = load("mlp.experts.gate_up_proj", {E, 2 * I, H});
    w.down = load("mlp.experts.down_proj", {E, H, I});
  } else {  // the published per-expert tensors, stacked once at load
    std::vector<at::Tensor> gate_up, down;
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = "mlp.experts." + std::to_string(e) + ".";
      gate_up.push_back(at::cat({load(p + "gate_proj.weight", {I, H}), load(p + "up_proj.weight", {I, H})}, 0));
      down.push_back(load(p + "down_proj.weight", {H, I}));
    }
    w.gate_up = at::stack(gate_up);
    w.down = at::stack(down);
  }
  if (m.shared_intermediate > 0) {
    const int64_t S = m.shared_intermediate;
    w.shared_gate_proj = load("mlp.shared_expert.gate_proj.weight", {S, H});
    w.shared_up = load("mlp.shared_expert.up_proj.weight", {S, H});
    w.shared_down = load("mlp.shared_expert.down_proj.weight", {H, S});
    w.shared_gate = load("mlp.shared_expert_gate.weight", {1, H});
  }
  return w;
}

}  // namespace dflash::models
