#include "target_setup.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "compute_settings.h"
#include "drafter_from_target.h"
#include "family_cost.h"
#include "drafter_spec.h"
#include "hidden_shards.h"
#include "index_list.h"
#include "memory_fit.h"
#include "memory_planner.h"
#include "run_settings.h"
#include "serving_engines.h"
#include "safetensors.h"
#include "target_cost.h"
#include "target_loader.h"

namespace fs = std::filesystem;

namespace dflash::train {
namespace {

// Embedding and LM head of the target (CPU copies; the same tensor when the target ties them).
drafter::FrozenTarget frozen_from_model(const models::TargetModel& m) {
  drafter::FrozenTarget t;
  t.embed = m.embed_weight().to(at::kCPU);
  t.lm_head = m.lm_head_weight().is_same(m.embed_weight()) ? t.embed : m.lm_head_weight().to(at::kCPU);
  return t;
}

// Embedding and LM head straight from an HF folder's safetensors (no architecture support needed).
drafter::FrozenTarget frozen_from_folder(const std::string& dir, bool tied) {
  const auto f = io::SafetensorsFolder::open(dir);
  auto first = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (f.contains(n)) return n;
    return "";
  };
  const std::string e = first({"model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
                               "language_model.model.embed_tokens.weight", "embed_tokens.weight"});
  if (e.empty()) throw std::invalid_argument(dir + ": no embedding tensor (expected model.embed_tokens.weight)");
  drafter::FrozenTarget t;
  t.embed = f.load(e);
  const std::string h = first({"lm_head.weight", "model.lm_head.weight", "language_model.lm_head.weight"});
  if (tied || h.empty()) {
    if (!tied) throw std::invalid_argument(dir + ": no lm_head.weight and the drafter config does not tie embeddings");
    t.lm_head = t.embed;
  } else {
    t.lm_head = f.load(h);
  }
  return t;
}

// Offline features only fit the drafter they were dumped for: the same target layers of a target as deep.
void check_features_match(const data::SampleSource& samples, const drafter::DrafterConfig& d, const std::string& path) {
  const auto ids = samples.target_layer_ids();
  const std::string have = data::join_ids(ids), want = data::join_ids(d.target_layer_ids);
  if (!ids.empty() && ids != d.target_layer_ids)
    throw std::invalid_argument("data: " + path + " holds hidden states of target layers [" + have +
                                "], the drafter config asks for [" + want +
                                "]; dump again with `dflash data dump-hidden --target-layer-ids " + want +
                                "` or train with target_layer_ids = " + have);
  const int64_t L = samples.target_num_layers();
  if (L > 0 && L != d.num_target_layers)
    throw std::invalid_argument("data: " + path + " was dumped from a target with " + std::to_string(L) +
                                " layers, the drafter config's target has " + std::to_string(d.num_target_layers));
}

// Online: every CUDA stage device must hold its stage of the target (weights + a micro-batch's activations).
void check_target_layout_fits(const TrainConfig& cfg, const models::TargetConfig& tcfg, const drafter::DrafterConfig& d,
                              const models::DeviceLayout& layout, at::ScalarType dtype) {
  if (layout.all_cpu()) return;  // CPU replicas share one set of weights; RAM is the OS's to refuse
  std::vector<int64_t> captured(d.target_layer_ids.begin(), d.target_layer_ids.end());
  if (cfg.kl_weight > 0 || drafter::family_cost(d).needs_last_hidden(d))  // the last hidden state is kept too
    captured.push_back(tcfg.num_hidden_layers - 1);
  const std::string problem = models::layout_memory_problem(
      tcfg, int64_t(c10::elementSize(dtype)), layout, cfg.batch_size * cfg.max_len, captured,
      [](at::Device dev) { return dev.is_cuda() ? double(ops::device_memory_bytes(dev)) : -1.0; },
      "train config: 'target_devices' '" + cfg.target_devices.text + "'");
  if (!problem.empty()) throw std::invalid_argument(problem);
}

}  // namespace

void check_target_layout(const TrainConfig& cfg, const models::TargetConfig& tcfg, const drafter::DrafterConfig& d,
                         const models::DeviceLayout& layout, at::ScalarType target_dtype) {
  if (layout.num_stages() > tcfg.num_hidden_layers)
    throw std::invalid_argument("train config: 'target_devices' '" + cfg.target_devices.text + "' has " +
                                std::to_string(layout.num_stages()) + " pipeline stages per replica for a target of " +
                                std::to_string(tcfg.num_hidden_layers) + " layers (at most one stage per layer)");
  check_target_layout_fits(cfg, tcfg, d, layout, target_dtype);
}

plan::PlanSettings run_plan_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute,
                                     plan::PlanDevice device) {
  plan::PlanSettings ps;
  ps.cfg = d;
  ps.batch = cfg.batch_size;
  ps.seq_len = cfg.max_len;
  ps.num_anchors = cfg.num_anchors;
  ps.dtype_bytes = int64_t(c10::elementSize(compute));
  ps.checkpoint = cfg.activation_checkpoint;
  ps.loss_chunk_rows = cfg.loss_chunk_rows;
  ps.kl_weight = cfg.kl_weight;
  ps.optimizer = plan::PlanOptimizer::AdamW;
  ps.master_fp32 = compute != at::kFloat && compute != at::kDouble;
  ps.device = device;
  ps.deterministic = cfg.deterministic;
  ps.attention_backend = cfg.attention_backend;
  return ps;
}

std::vector<std::pair<at::Device, int64_t>> drafter_device_workers(const std::vector<at::Device>& node_drafter) {
  std::vector<std::pair<at::Device, int64_t>> devices;
  for (const at::Device& dev : node_drafter) {
    const auto it = std::find_if(devices.begin(), devices.end(), [&](const auto& p) { return p.first == dev; });
    if (it == devices.end()) devices.emplace_back(dev, 1);
    else ++it->second;
  }
  return devices;
}

void check_budget(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute) {
  if (!cfg.budget.set()) return;
  const plan::PlanSettings ps = run_plan_settings(
      cfg, d, compute, cfg.drafter_devices.devices.front().cuda ? plan::PlanDevice::Cuda : plan::PlanDevice::Cpu);
  const double budget = cfg.budget.bytes;
  const auto plan = plan::plan_memory(ps);
  if (plan.peak_bytes <= budget) return;
  const auto choice = plan::plan_for_budget(ps, budget);
  std::string hint = choice.fits ? "; it fits with activation_checkpoint " +
                                       choice.plan.settings.checkpoint.name() +
                                       " and loss_chunk_rows " + std::to_string(choice.plan.settings.loss_chunk_rows)
                                 : "; nothing fits: " + choice.why;
  throw std::invalid_argument("budget: the planned peak per worker is " + util::human_bytes(plan.peak_bytes) +
                              " (at " + plan.peak_phase + "), over the budget of " + util::human_bytes(budget) + hint);
}

void check_memory(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute,
                  const std::vector<at::Device>& node_drafter) {
  check_budget(cfg, d, compute);
  for (const auto& [dev, workers] : drafter_device_workers(node_drafter)) {
    const plan::PlanSettings ps =
        run_plan_settings(cfg, d, compute, dev.is_cuda() ? plan::PlanDevice::Cuda : plan::PlanDevice::Cpu);
    const plan::MemoryPlan p = plan::plan_memory(ps);
    const plan::DeviceFit fit = plan::device_fit(p, dev, workers);
    if (fit.fits) continue;
    const auto choice = plan::plan_for_budget(ps, fit.available_bytes / double(workers));
    const std::string hint =
        choice.fits ? "it fits with activation_checkpoint " + choice.plan.settings.checkpoint.name() +
                          " and loss_chunk_rows " + std::to_string(choice.plan.settings.loss_chunk_rows)
                    : "a smaller max_len, num_anchors or batch_size, or a smaller drafter (nothing else fits: " +
                          choice.why + ")";
    throw std::invalid_argument("train: " + fit.text + " (refused before allocating); " + hint);
  }
}

models::TargetConfig target_shapes_of(const drafter::DrafterConfig& d) {
  models::TargetConfig t;
  t.vocab_size = d.vocab_size;
  t.hidden_size = d.hidden_size;
  t.num_hidden_layers = d.num_target_layers;
  t.tie_word_embeddings = d.tie_word_embeddings;
  t.finish();
  return t;
}

drafter::DrafterConfig resolve_drafter_config_from_files(const TrainConfig& cfg, const RunDevices& node) {
  models::TargetConfig target;
  try {
    target = models::read_target_config(cfg.target);
  } catch (const std::exception&) {
    if (cfg.drafter_config.empty()) throw;
    return resolve_drafter_config(cfg, target_shapes_of(drafter::load_drafter_config(cfg.drafter_config)));
  }
  const drafter::DrafterConfig d = resolve_drafter_config(cfg, target);
  check_target_layout(cfg, target, d, node.target, ops::scalar_type(cfg.target_dtype));
  return d;
}

std::vector<const models::TargetModel*> target_replicas(const TargetSide& side) {
  std::vector<const models::TargetModel*> out;
  if (!side.target) return out;
  out.push_back(side.target.get());
  for (const auto& r : side.more_replicas) out.push_back(r.get());
  return out;
}

// Drafter layer i <- target layer first + i, tensor by tensor (the drafter's q/k norms stay at 1 when the target
// has none; target biases have no drafter counterpart). Meant as a trained start for runs with little data; on
// the CPU demo it was not better than noise (docs/BENCHMARKS.md).
void copy_target_layers(const models::TargetModel& target, int64_t first, drafter::DrafterWeights& w) {
  const int64_t n = int64_t(w.layers.size()), have = target.config().num_hidden_layers;
  if (first + n > have)
    throw std::invalid_argument("train config: 'init_from_target_layer' must be <= " + std::to_string(have - n) +
                                " (the target has " + std::to_string(have) + " layers, the drafter " +
                                std::to_string(n) + "), got " + std::to_string(first));
  at::NoGradGuard no_grad;
  for (int64_t i = 0; i < n; ++i) {
    const auto src = target.layer_weights(int(first + i));
    for (int p = 0; p < drafter::kNumLayerParams; ++p) {
      const auto it = src.find(drafter::layer_param_suffix(p));
      if (it == src.end()) continue;
      at::Tensor& dst = w.layers[size_t(i)].t[size_t(p)];
      if (it->second.sizes() != dst.sizes())
        throw std::invalid_argument("train config: 'init_from_target_layer': target layer " +
                                    std::to_string(first + i) + " " + it->first + " has another shape than the "
                                    "drafter's (drafter_config differs from the target)");
      dst.copy_(it->second);
    }
  }
}

drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& t) {
  std::optional<drafter::DrafterConfig> file;
  if (!cfg.drafter_config.empty()) file = drafter::load_drafter_config(cfg.drafter_config);
  return resolve_drafter_config(cfg, t, file);
}

drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& t,
                                              const std::optional<drafter::DrafterConfig>& file) {
  drafter::DrafterConfig d;
  if (file) {
    d = *file;
    // The run's draft vocabulary is set_up_draft_vocab's alone (draft_vocab, which resolve_drafter_family took from
    // this file): the file's own count must not outlive a full-vocabulary run in its saved drafter config.
    d.draft_vocab_size = 0;
    // The drafter config sets its fields, mask_token_id included: one given beside it with another value is refused,
    // not dropped (drafter_spec.h's rule; resolve_drafter_family applied it to `cfg` already, this keeps callers
    // that skip it). A file without a mask token takes the train config's.
    merge_specs(spec_of_train_config(cfg, d.family), spec_of_drafter_config(d, cfg.drafter_config), "train config");
    if (d.mask_token_id < 0) d.mask_token_id = cfg.mask_token_id;
  } else {
    d = drafter::drafter_config_for_target(t, cfg.drafter_layers, cfg.block_size, cfg.mask_token_id,
                                           cfg.target_layer_ids);
    apply_family_settings(cfg, d);
  }
  if (d.mask_token_id < 0)
    throw std::invalid_argument("train config: 'mask_token_id' is required (a real, never-trained token of the "
                                "target vocabulary; the drafter config gives none)");
  if (d.hidden_size != t.hidden_size || d.vocab_size != t.vocab_size)
    throw std::invalid_argument("drafter config: hidden_size/vocab_size (" + std::to_string(d.hidden_size) + "/" +
                                std::to_string(d.vocab_size) + ") must equal the target's (" +
                                std::to_string(t.hidden_size) + "/" + std::to_string(t.vocab_size) + ")");
  for (auto id : d.target_layer_ids)
    if (id < 0 || id >= t.num_hidden_layers)
      throw std::invalid_argument("drafter config: target layer id " + std::to_string(id) + " is outside the target's " +
                                  std::to_string(t.num_hidden_layers) + " layers");
  drafter::check_capturable_layer_ids(d.target_layer_ids, t.num_hidden_layers,
                                      cfg.drafter_config.empty() ? "train config: target_layer_ids"
                                                                 : cfg.drafter_config + ": dflash_config.target_layer_ids");
  d.validate(cfg.drafter_config.empty() ? "drafter config (from the target)" : cfg.drafter_config);
  return d;
}

TargetSide load_target_side(const TrainConfig& cfg, const RunContext& run) {
  const at::ScalarType compute = run.compute;
  TargetSide t;
  t.samples = data::open_samples(cfg.data, cfg.data_format);
  if (t.samples->has_features() && cfg.target_devices.text != TrainConfig{}.target_devices.text)  // refused, not dropped
    throw std::invalid_argument("train config: 'target_devices' is not used with offline data (" + cfg.data +
                                " holds the target's features: the target does not run), got '" + cfg.target_devices.text + "'");
  // Offline data + a drafter config + an HF folder: only the embedding and LM head are read, so targets
  // this project cannot run still work with their existing hidden-state dumps.
  // The drafter config file, read once for every phase below.
  std::optional<drafter::DrafterConfig> file;
  if (!cfg.drafter_config.empty()) file = drafter::load_drafter_config(cfg.drafter_config);
  const bool frozen_only = t.samples->has_features() && file && fs::is_directory(cfg.target);
  if (frozen_only) {
    models::TargetConfig tcfg = target_shapes_of(*file);  // what resolve_drafter_config checks: its own shapes first
    check_memory(cfg, resolve_drafter_config(cfg, tcfg, file), compute, run.node.drafter);  // before the embedding is read
    t.frozen = frozen_from_folder(cfg.target, file->tie_word_embeddings);
    tcfg.vocab_size = t.frozen.embed.size(0);  // then checked against the weights themselves
    tcfg.hidden_size = t.frozen.embed.size(1);
    t.dcfg = resolve_drafter_config(cfg, tcfg, file);
  } else {
    const models::TargetConfig tcfg = models::read_target_config(cfg.target);
    t.dcfg = resolve_drafter_config(cfg, tcfg, file);
    check_memory(cfg, t.dcfg, compute, run.node.drafter);
    models::TargetLoadOptions topt;
    topt.dtype = run.target_compute;
    const bool online = !t.samples->has_features();
    const models::DeviceLayout& layout = run.target_layout;
    if (online) {  // the target's layers over target_devices: replicas x pipeline stages
      check_target_layout(cfg, tcfg, t.dcfg, layout, run.target_compute);
      const auto& first = layout.replicas.front();
      if (first.size() > 1 || first.front() != at::Device(at::kCPU))
        topt.stages = models::split_layers(int(tcfg.num_hidden_layers), first);
    }
    t.target = std::make_unique<models::TargetModel>(models::load_target(cfg.target, topt));
    if (online)  // read from disk once: the other replicas are copies of the first
      for (size_t r = 1; r < layout.replicas.size(); ++r)
        t.more_replicas.push_back(std::make_unique<models::TargetModel>(t.target->replicate(layout.replicas[r])));
    t.frozen = frozen_from_model(*t.target);
  }
  check_features_match(*t.samples, t.dcfg, cfg.data);
  return t;
}

}  // namespace dflash::train
