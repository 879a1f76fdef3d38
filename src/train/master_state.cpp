#include "master_state.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "drafter_weights.h"

namespace dflash::train {
namespace {

const at::Tensor& find(const NamedTensors& v, const std::string& name, const char* what) {
  for (const auto& [k, t] : v)
    if (k == name) return t;
  throw std::invalid_argument(std::string("checkpoint: ") + what + " for " + name + " missing");
}

}  // namespace

MasterState build_master_state(const TrainConfig& cfg, const RunContext& run, const TargetSide& side) {
  drafter::DrafterWeights w;
  if (run.resume) {
    std::vector<std::string> names;
    for (const auto& [n, t] : run.resume->master) names.push_back(n);
    w = drafter::drafter_weights_from(
        side.dcfg, names, [&](const std::string& n) { return find(run.resume->master, n, "master weight"); },
        run.master_dtype, "checkpoint");
  } else {
    w = cfg.init_from.empty()
            ? drafter::init_drafter_weights(side.dcfg, run.master_dtype, uint64_t(cfg.seed), cfg.init_std, 0.0,
                                            cfg.init_final_norm)
            : drafter::load_starting_weights(side.dcfg, cfg.init_from, run.master_dtype, uint64_t(cfg.seed),
                                             cfg.init_std);
    if (cfg.init_from_target_layer >= 0) {
      if (!side.target)
        throw std::invalid_argument("train config: 'init_from_target_layer' needs the target's layers, but only its "
                                    "embedding is read here (offline data with a drafter_config and an HF folder)");
      copy_target_layers(*side.target, cfg.init_from_target_layer, w);
    }
  }
  MasterState m;
  for (const auto& [n, t] : w.named()) {
    m.named.emplace_back(n, t.to(run.grad_device));
    m.params.push_back(m.named.back().second);
  }
  m.adam = std::make_unique<AdamW>(m.params, AdamWSettings{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});
  if (run.resume) {
    for (size_t i = 0; i < m.named.size(); ++i) {
      m.adam->exp_avg()[i].copy_(find(run.resume->exp_avg, m.named[i].first, "AdamW state"));
      m.adam->exp_avg_sq()[i].copy_(find(run.resume->exp_avg_sq, m.named[i].first, "AdamW state"));
    }
    m.adam->set_steps(run.resume->step);
  }
  return m;
}

TrainState MasterState::checkpoint(int64_t step, int64_t data_pos, nlohmann::json info) const {
  TrainState st;
  st.step = step;
  st.data_pos = data_pos;
  for (size_t i = 0; i < named.size(); ++i) {
    st.master.emplace_back(named[i].first, named[i].second.to(at::kCPU));
    st.exp_avg.emplace_back(named[i].first, adam->exp_avg()[i].to(at::kCPU));
    st.exp_avg_sq.emplace_back(named[i].first, adam->exp_avg_sq()[i].to(at::kCPU));
  }
  st.info = std::move(info);
  return st;
}

bool MasterState::finite() const {
  for (const auto& p : params)
    if (!at::isfinite(p).all().item<bool>()) return false;
  return true;
}

}  // namespace dflash::train
