#include "trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include "checkpoint.h"
#include "distributed.h"
#include "drafter_from_target.h"
#include "drafter_model.h"
#include "hidden_shards.h"
#include "memory_planner.h"
#include "optimizer.h"
#include "safetensors.h"
#include "step_producer.h"
#include "target_loader.h"
#include "train_log.h"
#include "worker_thread.h"

namespace fs = std::filesystem;

namespace dflash::train {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  g_stop = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

at::ScalarType dtype_of(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  if (s == "fp32" || s == "float32") return at::kFloat;
  if (s == "fp64" || s == "float64") return at::kDouble;
  if (s == "fp16" || s == "float16") return at::kHalf;
  throw std::invalid_argument("dtype: expected bf16, fp32 or fp64, got '" + s + "'");
}

std::vector<int64_t> parse_id_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      out.push_back(std::stoll(item));
    } catch (const std::exception&) {
      throw std::invalid_argument("train config: 'target_layer_ids' must be a comma list of integers, got '" + s + "'");
    }
  }
  return out;
}

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

// --budget: the memory planner's peak for one worker's micro-batch must fit, checked before loading weights.
void check_budget(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute) {
  if (cfg.budget.empty()) return;
  drafter::PlanSettings ps;
  ps.cfg = d;
  ps.batch = cfg.batch_size;
  ps.seq_len = cfg.max_len;
  ps.num_anchors = cfg.num_anchors;
  ps.dtype_bytes = int64_t(c10::elementSize(compute));
  ps.checkpoint_every = drafter::CheckpointPolicy::parse(cfg.activation_checkpoint).every;
  ps.loss_chunk_rows = cfg.loss_chunk_rows;
  ps.kl_weight = cfg.kl_weight;
  ps.optimizer = "adamw";
  ps.master_fp32 = compute != at::kFloat && compute != at::kDouble;
  ps.device = cfg.drafter_device_list().front().rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  const double budget = drafter::parse_bytes(cfg.budget);
  const auto plan = drafter::plan_memory(ps);
  if (plan.peak_bytes <= budget) return;
  const auto choice = drafter::plan_for_budget(ps, budget);
  std::string hint = choice.fits ? "; it fits with activation_checkpoint " +
                                       drafter::CheckpointPolicy{choice.plan.settings.checkpoint_every}.name() +
                                       " and loss_chunk_rows " + std::to_string(choice.plan.settings.loss_chunk_rows)
                                 : "; nothing fits: " + choice.why;
  throw std::invalid_argument("budget: the planned peak per worker is " + drafter::human_bytes(plan.peak_bytes) +
                              " (at " + plan.peak_phase + "), over the budget of " + drafter::human_bytes(budget) + hint);
}

struct Replica {
  at::Device device = at::kCPU;
  drafter::DrafterWeights w;
  std::vector<at::Tensor> params;  // w.named() order
  drafter::FrozenTarget frozen;
};

struct WorkerOut {
  std::vector<at::Tensor> grads;  // master dtype, on the gradient device, w.named() order
  double loss_sum = 0;            // sum over micro-batches of loss_mb * weight_mb
  at::Tensor slot_correct, slot_count;
};

WorkerOut run_worker(int index, Replica& r, const drafter::DrafterConfig& dcfg, const drafter::DrafterLossOptions& lopt,
                     drafter::CheckpointPolicy ckpt, const std::vector<const MicroBatch*>& micro,
                     at::ScalarType master_dtype, at::ScalarType compute, const at::Device& grad_device) {
  // Test hook: DFLASH_TEST_FAIL_WORKER=i makes worker i throw (error propagation tests).
  if (const char* f = std::getenv("DFLASH_TEST_FAIL_WORKER"); f && std::atoi(f) == index)
    throw std::runtime_error("worker " + std::to_string(index) + " (" + r.device.str() + "): test failure");
  WorkerOut out;
  out.slot_correct = at::zeros({dcfg.block_size}, at::kDouble);
  out.slot_count = at::zeros({dcfg.block_size}, at::kDouble);
  for (const MicroBatch* mb : micro) {
    auto dev = [&](const at::Tensor& t) { return t.defined() ? t.to(r.device) : t; };
    const drafter::AnchorSample anchors{dev(mb->anchors.anchors), dev(mb->anchors.keep)};
    const drafter::BlockBatch blocks{dev(mb->blocks.block_ids), dev(mb->blocks.labels), dev(mb->blocks.weights),
                                     dev(mb->blocks.teacher_index)};
    const at::Tensor feats = mb->features.to(r.device, compute);
    const at::Tensor last = mb->last_hidden.defined() ? mb->last_hidden.to(r.device, compute) : at::Tensor();
    auto res = drafter::drafter_loss(dcfg, r.w, r.frozen, feats, last, anchors, blocks, lopt, ckpt);
    // Unnormalised sum(w * loss_row): the step divides by the global weight after the all-reduce.
    (res.loss * mb->weight).backward();
    out.loss_sum += res.loss.item<double>() * mb->weight;
    out.slot_correct += res.slot_correct.to(at::kCPU, at::kDouble);
    out.slot_count += res.slot_count.to(at::kCPU, at::kDouble);
  }
  for (auto& p : r.params) {
    out.grads.push_back(p.grad().defined() ? p.grad().to(grad_device, master_dtype)
                                           : at::zeros(p.sizes(), at::TensorOptions(master_dtype).device(grad_device)));
    p.mutable_grad() = at::Tensor();
  }
  return out;
}

int64_t default_threads_per_worker(size_t workers) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, int64_t(hw) / int64_t(workers));
}

// Offline features only fit the drafter they were dumped for: the same target layers of a target as deep.
void check_features_match(const SampleSource& samples, const drafter::DrafterConfig& d, const std::string& path) {
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

}  // namespace

void install_sigint_handler() { std::signal(SIGINT, on_sigint); }

drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& t) {
  drafter::DrafterConfig d;
  if (!cfg.drafter_config.empty()) {
    d = drafter::load_drafter_config(cfg.drafter_config);
    if (cfg.mask_token_id >= 0) d.mask_token_id = cfg.mask_token_id;
  } else {
    d = drafter::drafter_config_for_target(t, cfg.drafter_layers, cfg.block_size, cfg.mask_token_id,
                                           cfg.target_layer_ids.empty() ? std::vector<int64_t>{}
                                                                        : parse_id_list(cfg.target_layer_ids));
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
  d.validate(cfg.drafter_config.empty() ? "drafter config (from the target)" : cfg.drafter_config);
  return d;
}

int run_training(const TrainConfig& cfg) {
  cfg.validate();
  const auto devices = cfg.drafter_device_list();
  // Where gradients are summed, clipped and applied (master weights, AdamW state): the first drafter device
  // when every worker is on CUDA (no host round trip; NCCL reduces there), else the CPU.
  bool all_cuda = true;
  for (const auto& d : devices) all_cuda = all_cuda && at::Device(d).is_cuda();
  const at::Device grad_device = all_cuda ? at::Device(devices.front()) : at::Device(at::kCPU);
  auto coll = collective_from_env(cfg.dist_backend, grad_device);
  const bool lead = coll->rank() == 0;
  const int64_t W = int64_t(devices.size());
  const at::ScalarType compute = dtype_of(cfg.dtype);
  const at::ScalarType master_dtype = compute == at::kDouble ? at::kDouble : at::kFloat;
  fs::create_directories(cfg.out);

  // Resume state first: a bad run directory should fail before anything heavy loads.
  std::unique_ptr<TrainState> resume;
  if (cfg.resume) {
    std::string path;
    resume = std::make_unique<TrainState>(load_latest_checkpoint(cfg.out, &path));
    if (lead) std::fprintf(stderr, "resuming from %s (step %lld)\n", path.c_str(), (long long)resume->step);
  } else if (has_checkpoint(cfg.out)) {
    throw std::invalid_argument(cfg.out + ": already holds checkpoints; pass --resume to continue or use a new --out");
  }

  // Target: its embedding and LM head are the drafter's (frozen); online data also runs its forward.
  // Architecture first: the memory budget is checked before any weight is read.
  auto samples = open_samples(cfg.data, cfg.data_format);
  // Offline data + a drafter config + an HF folder: only the embedding and LM head are read, so targets
  // this project cannot run (hybrid architectures) still work with their existing hidden-state dumps.
  const bool frozen_only = samples->has_features() && !cfg.drafter_config.empty() && fs::is_directory(cfg.target);
  std::unique_ptr<models::TargetModel> target;
  drafter::FrozenTarget frozen_cpu;
  drafter::DrafterConfig dcfg;
  if (frozen_only) {
    const drafter::DrafterConfig file_cfg = drafter::load_drafter_config(cfg.drafter_config);
    models::TargetConfig tcfg;  // what resolve_drafter_config checks: the drafter config's shapes first
    tcfg.vocab_size = file_cfg.vocab_size;
    tcfg.hidden_size = file_cfg.hidden_size;
    tcfg.num_hidden_layers = file_cfg.num_target_layers;
    tcfg.tie_word_embeddings = file_cfg.tie_word_embeddings;
    check_budget(cfg, resolve_drafter_config(cfg, tcfg), compute);  // before the embedding is read
    frozen_cpu = frozen_from_folder(cfg.target, file_cfg.tie_word_embeddings);
    tcfg.vocab_size = frozen_cpu.embed.size(0);  // then checked against the weights themselves
    tcfg.hidden_size = frozen_cpu.embed.size(1);
    dcfg = resolve_drafter_config(cfg, tcfg);
  } else {
    const models::TargetConfig tcfg = models::read_target_config(cfg.target);
    dcfg = resolve_drafter_config(cfg, tcfg);
    check_budget(cfg, dcfg, compute);
    models::TargetLoadOptions topt;
    topt.dtype = dtype_of(cfg.target_dtype);
    if (!samples->has_features()) {  // online: the target's layers over target_devices (pipeline stages)
      std::vector<at::Device> tdev;
      for (const auto& d : cfg.target_device_list()) tdev.emplace_back(d);
      if (tdev.size() > 1 || tdev.front() != at::Device(at::kCPU))
        topt.stages = models::split_layers(int(tcfg.num_hidden_layers), tdev);
    }
    target = std::make_unique<models::TargetModel>(models::load_target(cfg.target, topt));
    frozen_cpu = frozen_from_model(*target);
  }

  check_features_match(*samples, dcfg, cfg.data);
  const int64_t per_step = cfg.batch_size * cfg.grad_accum * W * coll->world();
  const int64_t total_steps =
      cfg.steps > 0 ? cfg.steps : (cfg.epochs * samples->size() + per_step - 1) / per_step;
  if (lead) {
    write_file_atomic((fs::path(cfg.out) / "train_config.json").string(), to_json(cfg).dump(2) + "\n");
    drafter::save_drafter_config((fs::path(cfg.out) / "drafter_config.json").string(), dcfg);
    std::fprintf(stderr, "data: %s\ndrafter: %lld layers, hidden %lld, target layers [", samples->describe().c_str(),
                 (long long)dcfg.num_hidden_layers, (long long)dcfg.hidden_size);
    for (size_t i = 0; i < dcfg.target_layer_ids.size(); ++i)
      std::fprintf(stderr, "%s%lld", i ? "," : "", (long long)dcfg.target_layer_ids[i]);
    std::fprintf(stderr, "]; %lld workers (%s); %s; %lld steps x %lld sequences\n", (long long)W,
                 cfg.drafter_devices.c_str(), coll->describe().c_str(), (long long)total_steps, (long long)per_step);
  }

  // Master weights (fp32, fp64 for fp64 compute) and AdamW state.
  drafter::DrafterWeights master;
  if (resume) {
    std::vector<std::string> names;
    for (const auto& [n, t] : resume->master) names.push_back(n);
    master = drafter::drafter_weights_from(
        dcfg, names,
        [&](const std::string& n) {
          for (const auto& [k, t] : resume->master)
            if (k == n) return t;
          throw std::invalid_argument("checkpoint: missing " + n);
        },
        master_dtype, "checkpoint");
  } else {
    master = drafter::init_drafter_weights(dcfg, master_dtype, uint64_t(cfg.seed), cfg.init_std, 0.0,
                                          cfg.init_final_norm);
    if (cfg.init_from_target_layer >= 0) {
      if (!target)
        throw std::invalid_argument("train config: 'init_from_target_layer' needs the target's layers, but only its "
                                    "embedding is read here (offline data with a drafter_config and an HF folder)");
      copy_target_layers(*target, cfg.init_from_target_layer, master);
    }
  }
  NamedTensors named;
  std::vector<at::Tensor> mparams;
  for (const auto& [n, t] : master.named()) {
    named.emplace_back(n, t.to(grad_device));
    mparams.push_back(named.back().second);
  }
  auto to_host = [](const NamedTensors& v) {
    NamedTensors out;
    for (const auto& [n, t] : v) out.emplace_back(n, t.to(at::kCPU));
    return out;
  };
  AdamW adam(mparams, AdamWSettings{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});
  if (resume) {
    auto find = [&](const NamedTensors& v, const std::string& n) {
      for (const auto& [k, t] : v)
        if (k == n) return t;
      throw std::invalid_argument("checkpoint: AdamW state for " + n + " missing");
    };
    for (size_t i = 0; i < named.size(); ++i) {
      adam.exp_avg()[i].copy_(find(resume->exp_avg, named[i].first));
      adam.exp_avg_sq()[i].copy_(find(resume->exp_avg_sq, named[i].first));
    }
    adam.set_steps(resume->step);
  }

  // Workers: one thread, device and replica each.
  const int64_t threads = cfg.threads > 0 ? cfg.threads : default_threads_per_worker(devices.size());
  std::vector<Replica> replicas(devices.size());
  std::vector<std::unique_ptr<WorkerThread>> workers;
  for (size_t i = 0; i < devices.size(); ++i) {
    Replica& r = replicas[i];
    r.device = at::Device(devices[i]);
    std::vector<std::string> names;
    for (const auto& [n, t] : named) names.push_back(n);
    r.w = drafter::drafter_weights_from(
        dcfg, names,
        [&](const std::string& n) {
          for (const auto& [k, t] : named)
            if (k == n) return t.detach().to(r.device, compute, false, /*copy=*/true);
          throw std::logic_error("replica: no master weight " + n);
        },
        compute, "replica");
    for (const auto& [n, t] : r.w.named()) r.params.push_back(t);  // same order as `named`
    r.w.set_requires_grad(true);
    r.frozen.embed = frozen_cpu.embed.to(r.device, compute);
    r.frozen.lm_head = dcfg.tie_word_embeddings || frozen_cpu.lm_head.is_same(frozen_cpu.embed)
                           ? r.frozen.embed
                           : frozen_cpu.lm_head.to(r.device, compute);
    workers.push_back(std::make_unique<WorkerThread>([threads] { at::set_num_threads(int(threads)); }));
  }

  drafter::DrafterLossOptions lopt;
  lopt.gamma = cfg.gamma > 0 ? cfg.gamma : drafter::default_loss_gamma(dcfg.block_size);
  lopt.chunk.chunk_rows = cfg.loss_chunk_rows;
  lopt.chunk.kl_weight = cfg.kl_weight;
  const auto ckpt_policy = drafter::CheckpointPolicy::parse(cfg.activation_checkpoint);

  ProducerSettings ps;
  ps.dcfg = dcfg;
  ps.batch_size = cfg.batch_size;
  ps.grad_accum = cfg.grad_accum;
  ps.workers = W;
  ps.rank = coll->rank();
  ps.world = coll->world();
  ps.max_len = cfg.max_len;
  ps.num_anchors = cfg.num_anchors;
  ps.seed = cfg.seed;
  ps.gamma = lopt.gamma;
  ps.want_last_hidden = cfg.kl_weight > 0;
  ps.queue_depth = cfg.queue_depth;
  const int64_t start_step = resume ? resume->step : 0;
  const int64_t start_pos = resume ? resume->data_pos : 0;
  StepProducer producer(ps, *samples, target.get(), start_step, total_steps, start_pos);

  TrainLog log(cfg.out, lead, start_step, total_steps, cfg.log_every);
  int64_t step = start_step, pos = start_pos;
  bool stopped = false;
  auto save = [&] {
    if (!lead) return;
    TrainState st;
    st.step = step;
    st.data_pos = pos;
    st.master = to_host(named);
    for (size_t i = 0; i < named.size(); ++i) {
      st.exp_avg.emplace_back(named[i].first, adam.exp_avg()[i].to(at::kCPU));
      st.exp_avg_sq.emplace_back(named[i].first, adam.exp_avg_sq()[i].to(at::kCPU));
    }
    st.info = {{"settings", to_json(cfg)}, {"seed", cfg.seed}, {"world", coll->world()}, {"workers", W}};
    const std::string p = save_checkpoint(cfg.out, st, cfg.keep_checkpoints);
    log.message("checkpoint " + p);
  };

  auto t0 = std::chrono::steady_clock::now();  // wall time per step includes waiting for the producer
  while (step < total_steps) {
    auto item = producer.next();
    if (!item) break;
    std::vector<std::future<WorkerOut>> futs;
    for (size_t wi = 0; wi < workers.size(); ++wi) {
      std::vector<const MicroBatch*> mine;
      for (const auto& mb : item->micro)
        if (mb.worker == int(wi)) mine.push_back(&mb);
      futs.push_back(workers[wi]->submit([&, wi, mine] {
        return run_worker(int(wi), replicas[wi], dcfg, lopt, ckpt_policy, mine, master_dtype, compute, grad_device);
      }));
    }
    std::vector<WorkerOut> outs;
    std::exception_ptr err;
    for (auto& f : futs) {  // wait for every worker before rethrowing, so none is left running
      try {
        outs.push_back(f.get());
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);

    // Sum gradients in worker order (deterministic) on the gradient device, then across processes.
    std::vector<at::Tensor> flat_parts;
    for (size_t i = 0; i < named.size(); ++i) {
      at::Tensor g = outs[0].grads[i];
      for (size_t w = 1; w < outs.size(); ++w) g = g + outs[w].grads[i];
      flat_parts.push_back(g.reshape({-1}));
    }
    at::Tensor flat = at::cat(flat_parts);
    double local_weight = 0, local_tokens = 0;
    for (const auto& mb : item->micro) local_weight += mb.weight, local_tokens += double(mb.tokens);
    const int64_t B = dcfg.block_size;
    at::Tensor stats = at::zeros({4 + 2 * B}, at::kDouble);
    stats[0] = local_weight;
    stats[1] = 0.0;
    for (const auto& o : outs) stats[1] += o.loss_sum;
    stats[2] = local_tokens;
    stats[3] = g_stop.load() ? 1.0 : 0.0;
    for (const auto& o : outs) {
      stats.narrow(0, 4, B).add_(o.slot_correct);
      stats.narrow(0, 4 + B, B).add_(o.slot_count);
    }
    coll->allreduce_sum(flat);
    coll->allreduce_sum(stats);
    const double total_weight = stats[0].item<double>();
    if (total_weight > 0) flat.div_(total_weight);
    std::vector<at::Tensor> grads;
    int64_t off = 0;
    for (const auto& p : mparams) {
      grads.push_back(flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
    const double gnorm = clip_grad_norm(grads, cfg.clip);
    const double lr = cosine_lr(step, total_steps, cfg.lr, cfg.warmup_ratio, cfg.min_lr_ratio);
    adam.step(grads, lr);
    {
      at::NoGradGuard g;
      for (auto& r : replicas)
        for (size_t i = 0; i < r.params.size(); ++i) r.params[i].copy_(mparams[i]);
    }
    ++step;
    pos = item->pos_after;

    StepMetrics m;
    m.step = step;
    m.loss = total_weight > 0 ? stats[1].item<double>() / total_weight : 0.0;
    const at::Tensor correct = stats.narrow(0, 4, B), count = stats.narrow(0, 4 + B, B);
    const at::Tensor acc = correct / count.clamp_min(1.0);
    for (int64_t k = 0; k < B; ++k) m.slot_acc.push_back(acc[k].item<double>());
    const double c1 = correct.narrow(0, 1, B - 1).sum().item<double>(), n1 = count.narrow(0, 1, B - 1).sum().item<double>();
    m.acc = n1 > 0 ? c1 / n1 : 0.0;
    m.lr = lr;
    m.grad_norm = gnorm;
    m.tokens = stats[2].item<double>();
    const auto t1 = std::chrono::steady_clock::now();
    m.step_seconds = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    log.step(m);

    stopped = stats[3].item<double>() > 0;
    const bool pause = cfg.stop_after > 0 && step - start_step >= cfg.stop_after;
    if (stopped || pause || step == total_steps || step % cfg.checkpoint_every == 0) save();
    if (stopped || pause) break;
  }
  producer.stop();
  if (lead && samples->skipped() > 0)
    log.message("data: " + std::to_string(samples->skipped()) + " invalid samples skipped (named in the warnings above)");
  if (const char* d = std::getenv("DFLASH_TEST_DUMP_RANK_WEIGHTS"); d && std::string(d) == "1") {
    // Test hook: every rank writes its master weights, to check that the ranks stayed identical.
    io::save_safetensors((fs::path(cfg.out) / ("weights.rank" + std::to_string(coll->rank()) + ".safetensors")).string(),
                         to_host(named));
  }
  log.finish(stopped ? "interrupted: checkpoint written, exiting" : "done");
  return stopped ? 130 : 0;
}

void export_run(const std::string& run_dir, const std::string& out_dir, const std::string& dtype) {
  std::string path;
  const TrainState st = load_latest_checkpoint(run_dir, &path);
  const auto dcfg = drafter::load_drafter_config((fs::path(run_dir) / "drafter_config.json").string());
  std::vector<std::string> names;
  for (const auto& [n, t] : st.master) names.push_back(n);
  const auto w = drafter::drafter_weights_from(
      dcfg, names,
      [&](const std::string& n) {
        for (const auto& [k, t] : st.master)
          if (k == n) return t;
        throw std::invalid_argument(path + ": missing " + n);
      },
      at::kFloat, path);
  fs::create_directories(out_dir);
  auto out_cfg = dcfg;
  const at::ScalarType dt = dtype.empty() ? dtype_of(dcfg.torch_dtype) : dtype_of(dtype);
  out_cfg.torch_dtype = dt == at::kBFloat16 ? "bfloat16" : dt == at::kHalf ? "float16" : dt == at::kDouble ? "float64" : "float32";
  drafter::save_drafter_config((fs::path(out_dir) / "config.json").string(), out_cfg);
  drafter::save_drafter_weights((fs::path(out_dir) / "model.safetensors").string(), w, dt);
  std::fprintf(stderr, "exported %s (step %lld) -> %s\n", path.c_str(), (long long)st.step, out_dir.c_str());
}

}  // namespace dflash::train
