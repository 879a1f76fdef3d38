// `dflash bench step` (bench_step.h): the flags into BenchStepOptions, and run_bench_step in named phases: the
// policies against the planner, then the generic cross-entropy, a draft vocabulary and the plain-PyTorch step side
// by side. DFLASH_BENCH_TRACE=1 prints live/peak memory after forward and backward.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <nlohmann/json.hpp>

#ifdef DFLASH_BENCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "args.h"
#include "atomic_output.h"
#include "attention_selfcheck.h"
#include "bench_step.h"
#include "compute_settings.h"
#include "cpu_isa.h"
#include "drafter_attention.h"
#include "family_registry.h"
#include "drafter_model.h"
#include "drafter_presets.h"
#include "family_cost.h"
#include "family_model.h"
#include "family_objective_bench.h"
#include "family_training.h"
#include "family_registry.h"
#include "dtype_names.h"
#include "memory_fit.h"
#include "memory_planner.h"
#include "node_planner.h"
#include "plan_commands.h"
#include "python_driver.h"
#include "run_shape.h"

namespace dflash::plan {

using namespace dflash::drafter;  // the drafter this layer plans and measures

using util::Args;

namespace {

using namespace dflash::drafter;

// Peak resident set since the last reset, and the reset itself (Linux /proc).
int64_t proc_status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  return -1;
}

int64_t reset_peak_rss() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  return proc_status_kb("VmRSS") * 1024;
}

// Where the step's memory is measured: peak RSS increase on the CPU, the caching allocator's peak of
// allocated bytes on a GPU (reserved-but-free cache blocks are not tensors and are not counted).
struct MemoryProbe {
  bool cuda = false;
  int64_t reset() const {
#ifdef DFLASH_BENCH_CUDA
    if (cuda) {
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
      return stat().current;
    }
#endif
    return reset_peak_rss();
  }
  int64_t peak() const {
#ifdef DFLASH_BENCH_CUDA
    if (cuda) {
      c10::cuda::device_synchronize();
      return stat().peak;
    }
#endif
    return proc_status_kb("VmHWM") * 1024;
  }
  // The peak starts again from what is live now; the caller keeps its earlier baseline (the setup's tensors stay
  // counted, its transients do not).
  void restart_peak() const {
#ifdef DFLASH_BENCH_CUDA
    if (cuda) {
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
      return;
    }
#endif
    reset_peak_rss();
  }
  int64_t now() const {
#ifdef DFLASH_BENCH_CUDA
    if (cuda) return stat().current;
#endif
    return proc_status_kb("VmRSS") * 1024;
  }
#ifdef DFLASH_BENCH_CUDA
  static c10::CachingAllocator::Stat stat() {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
        .allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)];
  }
#endif
};

// DFLASH_BENCH_TRACE set: live and peak memory after forward and backward on stderr (read here only, once).
bool bench_trace() {
  static const bool on = std::getenv("DFLASH_BENCH_TRACE") != nullptr;
  return on;
}

struct StepResult {
  std::vector<double> seconds;    // per iteration: the slowest worker's time
  double measured_bytes = 0;
  double loss = 0;                // worker 0's
  std::vector<at::Tensor> grads;  // worker 0's last gradients (CPU), to compare runs with
  double max_worker_diff = 0;     // largest |loss or gradient difference| between a worker and worker 0
};

// One worker's replica and inputs, built from the same seed as every other worker's (so all compute the same).
struct Replica {
  DrafterWeights w;
  at::Tensor feats, last;
  AnchorSample s;
  BlockBatch blocks;
  double loss = 0;
};

Replica make_replica(const DrafterConfig& c, at::ScalarType dtype, int64_t seq, int64_t anchors, double kl,
                     double gamma, uint64_t seed, const at::Device& dev) {
  Replica r;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  r.w = init_drafter_weights(c, dtype, seed);  // built on the CPU (seeded), moved one tensor at a time
  if (dev.is_cuda()) {
    for (auto* t : {&r.w.fc, &r.w.hidden_norm, &r.w.norm}) *t = t->to(dev);
    for (auto& l : r.w.layers)
      for (auto& t : l.t) t = t.to(dev);
    for (auto& h : r.w.heads) h.second = h.second.to(dev);  // DSpark's heads
    for (auto& cv : r.w.convs)                               // DFlash2's convs and selector
      for (auto* bw : {&cv.attention_conv, &cv.mlp_conv})
        for (auto* t : {&bw->base_kernel, &bw->kernel_projection}) *t = t->to(dev);
    for (auto* t : {&r.w.selector.hidden_projection, &r.w.selector.predecessor_codebook,
                    &r.w.selector.successor_codebook})
      if (t->defined()) *t = t->to(dev);
  }
  r.w.set_requires_grad(true);
  const auto opts = at::TensorOptions().dtype(dtype);
  const int64_t nH = int64_t(c.target_layer_ids.size()) * c.hidden_size;
  r.feats = at::randn({1, seq, nH}, gen, opts).to(dev);
  // Soft labels or the family's own teacher (DSpark's L1 and confidence): the target's last hidden state.
  const bool last = kl > 0 || family_cost(c).needs_last_hidden(c);
  r.last = last ? at::randn({1, seq, c.hidden_size}, gen, opts).to(dev) : at::Tensor();
  const at::Tensor ids = at::randint(0, c.vocab_size - 1, {1, seq}, gen, at::kLong).to(dev);
  at::Tensor loss_mask = at::ones({1, seq}, at::kBool);
  loss_mask.narrow(1, 0, seq / 8).fill_(false);  // a prompt
  std::mt19937_64 rng(seed);
  const AnchorSample s_cpu = sample_anchors(loss_mask, anchors, rng);
  r.s = AnchorSample{s_cpu.anchors.to(dev), s_cpu.keep.to(dev), at::Tensor(), at::Tensor()};  // unpacked rows
  // The family's blocks as training builds them (its training hook, as train/step_producer.cpp asks it).
  r.blocks = family_training(c).build_blocks(c, ids, loss_mask.to(dev), r.s, gamma);
  return r;
}

// The loss options training uses for the family (train/step_producer.cpp's run_loss_options with the defaults).
DrafterLossOptions bench_loss_options(const DrafterConfig& c, int64_t chunk, double kl, bool fused_ce,
                                      ops::AttentionBackend attention) {
  DrafterLossOptions opt;
  const double unset = family_training(c).unset_gamma();  // the gamma training gives a run that sets none
  opt.gamma = unset > 0 ? unset : default_loss_gamma(c.block_size);
  opt.chunk.chunk_rows = chunk;
  opt.chunk.kl_weight = kl;
  opt.chunk.fused_ce = fused_ce;
  opt.attention = attention;
  opt.dspark.chunk_rows = chunk;
  opt.dspark.fused = fused_ce;  // one switch for the fused CPU loss kernels (the generic row turns both off)
  family_training(c).add_drafter_loss_options(c, opt);  // DFlash2's selector top-K, as train sets it
  return opt;
}

// `workers` threads, each with its own replica and inputs (the trainer's topology: one replica per worker), run
// `iters` forward+backward+zero_grad steps at once on one device; the frozen embedding and LM head are shared,
// as the trainer's replicas on one device share them. Everything is created after the peak reset, so the
// measured increase covers weights, frozen matrices, inputs, activations and gradients -- what the planner
// predicts per worker with no optimizer; the peak restarts once they are built (setup transients are not a step's).
StepResult run_policy(const DrafterConfig& c, at::ScalarType dtype, int64_t seq, int64_t anchors, double kl,
                      int64_t chunk, CheckpointPolicy policy, int64_t iters, uint64_t seed, const MemoryProbe& probe,
                      bool fused_ce = true, int64_t workers = 1,
                      ops::AttentionBackend attention = ops::AttentionBackend::Fused, int threads_each = 0) {
  StepResult r;
  const int64_t baseline = probe.reset();
  const at::Device dev = probe.cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 7919);
    const auto opts = at::TensorOptions().dtype(dtype);
    FrozenTarget t;
    // Target-like scale (std 0.02) keeps logits, and so the loss, in a realistic range.
    t.embed = at::randn({c.vocab_size, c.hidden_size}, gen, opts).mul_(0.02).to(dev);
    t.lm_head = c.tie_word_embeddings ? t.embed : at::randn({c.vocab_size, c.hidden_size}, gen, opts).mul_(0.02).to(dev);
    // A draft vocabulary: the loss runs over K rows of the head (their own [K, H] copy, as in training).
    if (c.draft_vocab_size > 0) t.lm_head = t.lm_head.narrow(0, 0, c.draft_vocab_size).contiguous();
    const DrafterLossOptions opt = bench_loss_options(c, chunk, kl, fused_ce, attention);
    std::vector<Replica> reps;
    for (int64_t w = 0; w < workers; ++w) reps.push_back(make_replica(c, dtype, seq, anchors, kl, opt.gamma, seed, dev));
    if (c.draft_vocab_size > 0)  // labels as draft ids (the trainer maps them; outside targets only lose weight)
      for (auto& rep : reps) rep.blocks.labels = rep.blocks.labels.remainder(c.draft_vocab_size);
    // Building the replicas draws every weight in fp64 before casting it (init_drafter_weights): a [V, r] head of
    // DSpark or DFlash2 passes through 8 bytes an element once. Setup, not the step: its transients leave the peak.
    probe.restart_peak();
    if (bench_trace())
      std::fprintf(stderr, "  before forward: rss %.1f MB hwm %.1f MB\n", (probe.now() - baseline) / 1e6,
                   (probe.peak() - baseline) / 1e6);
    if (threads_each <= 0) threads_each = std::max(1, at::get_num_threads() / int(workers));
    for (int64_t it = 0; it < iters; ++it) {
      const bool last_iter = it + 1 == iters;
      const auto t0 = std::chrono::steady_clock::now();
      auto work = [&](Replica& rep) {
        {
          DrafterLossResult res = drafter_loss(c, rep.w, t, rep.feats, rep.last, rep.s, rep.blocks, opt, policy);
          if (bench_trace() && workers == 1)
            std::fprintf(stderr, "  after forward: rss %.1f MB hwm %.1f MB\n", (probe.now() - baseline) / 1e6,
                         (probe.peak() - baseline) / 1e6);
          res.loss.backward();
          rep.loss = res.loss.item<double>();
        }
        // zero_grad(set_to_none=True), except after the last iteration: those gradients are compared below.
        if (!last_iter)
          for (auto& p : rep.w.parameters()) p.mutable_grad() = at::Tensor();
#ifdef DFLASH_BENCH_CUDA
        if (probe.cuda) c10::cuda::device_synchronize();
#endif
      };
      if (workers == 1 && threads_each == at::get_num_threads()) {
        work(reps[0]);
      } else {
        std::vector<std::thread> pool;
        std::vector<std::exception_ptr> errors(static_cast<size_t>(workers));
        for (int64_t w = 0; w < workers; ++w)
          pool.emplace_back([&, w] {
            try {
              ops::set_thread_local_threads(threads_each);
              c10::OptionalDeviceGuard guard;
              if (probe.cuda) guard.reset_device(dev);
              work(reps[size_t(w)]);
            } catch (...) {
              errors[size_t(w)] = std::current_exception();
            }
          });
        for (auto& th : pool) th.join();
        for (auto& e : errors)
          if (e) std::rethrow_exception(e);
      }
      r.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    r.measured_bytes = double(probe.peak() - baseline);
    r.loss = reps[0].loss;
    for (auto& p : reps[0].w.parameters()) r.grads.push_back(p.grad().to(at::kCPU, at::kDouble));
    for (size_t w = 1; w < reps.size(); ++w) {
      r.max_worker_diff = std::max(r.max_worker_diff, std::abs(reps[w].loss - r.loss));
      const auto params = reps[w].w.parameters();
      for (size_t i = 0; i < params.size(); ++i)
        r.max_worker_diff = std::max(
            r.max_worker_diff, (params[i].grad().to(at::kCPU, at::kDouble) - r.grads[i]).abs().max().item<double>());
    }
  }
  return r;
}

// Largest |difference| between two runs' losses and gradients (worker 0 of each).
double max_run_diff(const StepResult& a, const StepResult& b) {
  double d = std::abs(a.loss - b.loss);
  for (size_t i = 0; i < a.grads.size() && i < b.grads.size(); ++i)
    d = std::max(d, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return d;
}

double mean_of(const std::vector<double>& v) {
  double mean = 0;
  for (double t : v) mean += t / double(v.size());
  return mean;
}

// One worker's plan for a policy: no optimizer, weights in the step's dtype (what the benchmark allocates).
PlanSettings plan_of(const BenchStepOptions& o, const drafter::CheckpointPolicy& policy, ops::AttentionBackend attention) {
  PlanSettings ps;
  ps.cfg = o.drafter;
  ps.seq_len = o.seq_len;
  ps.num_anchors = o.anchors;
  ps.dtype_bytes = int64_t(c10::elementSize(o.dtype));
  ps.checkpoint = policy;
  ps.loss_chunk_rows = o.loss_chunk_rows;
  ps.kl_weight = o.kl_weight;
  ps.optimizer = PlanOptimizer::None;
  ps.master_fp32 = false;
  ps.device = o.cuda ? PlanDevice::Cuda : PlanDevice::Cpu;
  ps.attention_backend = attention;
  return ps;
}

// The main rows: each policy at each worker count, measured against the planner.
void time_policies(const BenchStepOptions& o, ops::AttentionBackend attention, const MemoryProbe& probe,
                   nlohmann::json& out) {
  const DrafterConfig& c = o.drafter;
  for (const CheckpointPolicy& pol : o.policies) {
    const MemoryPlan p = plan_memory(plan_of(o, pol, attention));
    // W workers on one device: W of everything the plan counts, but one frozen embedding + LM head.
    const double frozen = double(c.vocab_size) * double(c.hidden_size) * double(c10::elementSize(o.dtype)) *
                          (c.tie_word_embeddings ? 1.0 : 2.0);
    // A lone worker per intra-op thread count: W workers share the cores (threads / W each), and a GEMM's rounding
    // may depend on its thread count, so each W is compared with a lone worker at the same count.
    std::map<int, StepResult> lone;
    for (int64_t workers : o.workers) {
      const int threads_each = std::max(1, at::get_num_threads() / int(workers));
      const StepResult r = run_policy(c, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, pol, o.iters,
                                      o.seed, probe, true, workers, attention, threads_each);
      if (workers == 1) lone.emplace(threads_each, r);
      if (!lone.count(threads_each))
        lone.emplace(threads_each, run_policy(c, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, pol, 1,
                                              o.seed, probe, true, 1, attention, threads_each));
      const StepResult* single = workers > 1 ? &lone.at(threads_each) : nullptr;
      const double planned = double(p.peak_bytes) + double(workers - 1) * (double(p.peak_bytes) - frozen);
      const double mean = mean_of(r.seconds);
      // Every worker computes the same step: they must agree with each other and with a lone worker at their thread count.
      const double diff = std::max(r.max_worker_diff, single ? max_run_diff(r, *single) : 0.0);
      const std::string same = workers == 1 ? "-" : diff == 0 ? "identical" : "max diff " + std::to_string(diff);
      const bool plan_ok = plan_within_tolerance(planned, r.measured_bytes);
      std::printf("%-10s %7lld %14.3f %12.3f %14s %14s %9.3f  %s\n", pol.name().c_str(), (long long)workers, mean,
                  double(workers) / mean, human_bytes(r.measured_bytes).c_str(), human_bytes(planned).c_str(),
                  planned / r.measured_bytes, same.c_str());
      if (!plan_ok)
        std::printf("  ^ the planner is off by %.1f%% (more than %.0f%%) for this step\n",
                    100 * (planned / r.measured_bytes - 1), 100 * kPlanTolerance);
      nlohmann::json run = {{"policy", pol.name()}, {"workers", workers}, {"seconds", r.seconds}, {"mean_seconds", mean},
                            {"steps_per_second", double(workers) / mean}, {"measured_peak_bytes", r.measured_bytes},
                            {"planned_peak_bytes", planned}, {"planned_peak_phase", p.peak_phase},
                            {"ratio", planned / r.measured_bytes}, {"plan_within_10_percent", plan_ok},
                            {"loss", r.loss}, {"plan", plan_to_json(p)}};
      if (workers > 1) run["max_diff_vs_single_worker"] = diff;
      out["runs"].push_back(run);
    }
  }
}

// The first policy again with the generic ATen cross-entropy passes instead of the fused CPU kernel (the kernel
// only runs for hard labels on CPU in float32/bf16; elsewhere both rows time the same code).
void compare_generic_ce(const BenchStepOptions& o, ops::AttentionBackend attention, const MemoryProbe& probe,
                        nlohmann::json& out) {
  const auto& ours = out["runs"][0];
  const StepResult r = run_policy(o.drafter, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows,
                                  o.policies.front(), o.iters, o.seed, probe, false, 1, attention);
  const double mean = mean_of(r.seconds);
  std::printf("%-10s %14.3f %14s %14s %9s   generic %s (ours %s: %.2fx faster)\n", "generic-ce", mean,
              human_bytes(r.measured_bytes).c_str(), "-", "-", family_cost(o.drafter).generic_loss_label(),
              ours["policy"].get<std::string>().c_str(),
              mean / ours["mean_seconds"].get<double>());
  out["generic_ce"] = {{"mean_seconds", mean}, {"seconds", r.seconds}, {"measured_peak_bytes", r.measured_bytes},
                       {"loss", r.loss}};
}

// The baseline the other families are timed against: a drafter config's default family (DFlash, the backbone they
// extend).
FamilyRef baseline_family() { return DrafterConfig{}.family; }

// A family other than the baseline (DSpark, DFlash2): the baseline's step on the same shapes (the first policy, one
// worker), and the family's measured time over it next to the planner's FLOP floor (drafter_step_flops of each
// step): what the family would cost if every step ran at one FLOP rate.
void compare_dflash_step(const BenchStepOptions& o, ops::AttentionBackend attention, const MemoryProbe& probe,
                         nlohmann::json& out) {
  const CheckpointPolicy pol = o.policies.front();
  double family_mean = 0;
  for (const auto& run : out["runs"])
    if (run["policy"] == pol.name() && run["workers"] == 1) family_mean = run["mean_seconds"].get<double>();
  if (family_mean == 0)  // no lone worker was timed: time one
    family_mean = mean_of(run_policy(o.drafter, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, pol,
                                     o.iters, o.seed, probe, true, 1, attention).seconds);
  BenchStepOptions d = o;
  d.drafter = drafter_as_family(o.drafter, baseline_family(), "bench step: the baseline drafter");
  const StepResult r = run_policy(d.drafter, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, pol,
                                  o.iters, o.seed, probe, true, 1, attention);
  const double mean = mean_of(r.seconds);
  const double family_flops = drafter_step_flops(plan_of(o, pol, attention)).total();
  const double dflash_flops = drafter_step_flops(plan_of(d, pol, attention)).total();
  std::printf("%-10s %14.3f %14s %14s %9s   DFlash's step on the same shapes (%s %s: %.2fx its time, FLOP floor "
              "%.2fx)\n",
              "dflash", mean, human_bytes(r.measured_bytes).c_str(), "-", "-", o.drafter.family.name(),
              pol.name().c_str(), family_mean / mean, family_flops / dflash_flops);
  out["vs_dflash"] = {{"policy", pol.name()},           {"dflash_mean_seconds", mean},
                      {"dflash_seconds", r.seconds},    {"family_mean_seconds", family_mean},
                      {"measured_ratio", family_mean / mean}, {"family_flops", family_flops},
                      {"dflash_flops", dflash_flops},   {"flop_floor_ratio", family_flops / dflash_flops}};
}

// The first policy again, side by side, with the loss over K rows instead of the whole vocabulary.
void compare_draft_vocab(const BenchStepOptions& o, ops::AttentionBackend attention, const MemoryProbe& probe,
                         nlohmann::json& out) {
  const int64_t k = o.draft_vocab;
  const DrafterConfig& c = o.drafter;
  DrafterConfig ck = c;
  ck.draft_vocab_size = k;
  const auto& ours = out["runs"][0];
  const StepResult r = run_policy(ck, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, o.policies.front(),
                                  o.iters, o.seed, probe, true, 1, attention);
  const double mean = mean_of(r.seconds);
  std::printf("%-10s %14.3f %14s %14s %9s   draft vocabulary %lld of %lld rows (full %s: %.3f s, %s; %.2fx the time)\n",
              "draft-voc", mean, human_bytes(r.measured_bytes).c_str(), "-", "-", (long long)k,
              (long long)c.vocab_size, ours["policy"].get<std::string>().c_str(), ours["mean_seconds"].get<double>(),
              human_bytes(ours["measured_peak_bytes"].get<double>()).c_str(), mean / ours["mean_seconds"].get<double>());
  out["draft_vocab"] = {{"k", k}, {"mean_seconds", mean}, {"seconds", r.seconds},
                        {"measured_peak_bytes", r.measured_bytes}, {"loss", r.loss}};
}

// The plain-PyTorch drafter our tests compare against, timed in its own process on the same shapes.
void compare_pytorch_reference(const BenchStepOptions& o, nlohmann::json& out) {
  const DrafterConfig& c = o.drafter;
  std::string types;
  for (const auto& t : c.layer_types) types += (types.empty() ? "" : ",") + t;
  const auto num = [](int64_t x) { return std::to_string(x); };
  const auto r = util::run_python(
      "bench_reference_step.py",
      {"--hidden", num(c.hidden_size), "--intermediate", num(c.intermediate_size), "--heads", num(c.num_attention_heads),
       "--kv-heads", num(c.num_key_value_heads), "--head-dim", num(c.head_dim), "--layers", num(c.num_hidden_layers),
       "--vocab", num(c.vocab_size), "--block", num(c.block_size), "--seq", num(o.seq_len), "--anchors", num(o.anchors),
       "--features", num(int64_t(c.target_layer_ids.size()) * c.hidden_size), "--iters", num(o.iters), "--threads",
       num(at::get_num_threads()), "--window", num(c.sliding_window), "--layer-types", types, "--kl-weight",
       std::to_string(o.kl_weight), "--dtype", util::hf_dtype_name(ops::dtype_of(o.dtype))});
  try {
    const auto j = nlohmann::json::parse(r.stdout_text.substr(r.stdout_text.rfind('{')));
    const double secs = j["mean_seconds"].get<double>(), bytes = j["peak_extra_mb"].get<double>() * (1 << 20);
    const auto& ours = out["runs"][0];
    std::printf("%-10s %14.3f %14s %14s %9s   plain PyTorch, dense mask (ours %s: %.1fx faster, %.1fx less memory)\n",
                "pytorch", secs, human_bytes(bytes).c_str(), "-", "-", ours["policy"].get<std::string>().c_str(),
                secs / ours["mean_seconds"].get<double>(), bytes / ours["measured_peak_bytes"].get<double>());
    out["reference"] = {{"impl", "plain PyTorch, dense mask"}, {"mean_seconds", secs}, {"measured_peak_bytes", bytes}};
  } catch (const std::exception&) {
    std::printf("pytorch reference failed (exit %d)\n", r.exit_code);
  }
}

// Shapes the step cannot mean, and shapes this machine cannot hold, refused before anything is allocated: every
// run below (the warm-up at policy none, each policy at each worker count, the draft-vocabulary row) is planned, and
// the largest must fit the device's available memory (plan/memory_fit.h). Out of memory used to end in an
// allocator failure with a C++ stack trace.
void check_bench_shapes(const BenchStepOptions& o) {
  check_step_shape(o.seq_len, o.anchors, "bench step: --num-anchors", "--max-len");
  const at::Device dev = o.cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  int64_t most_workers = 1;
  for (int64_t w : o.workers) most_workers = std::max(most_workers, w);
  const DrafterConfig& c = o.drafter;
  const double frozen = double(c.vocab_size) * double(c.hidden_size) * double(c10::elementSize(o.dtype)) *
                        (c.tie_word_embeddings ? 1.0 : 2.0);  // shared by the workers on the device (time_policies)
  std::optional<DeviceFit> worst;
  auto consider = [&](const MemoryPlan& p, int64_t workers) {
    const DeviceFit f = device_fit(p, dev, workers, frozen);
    if (!worst || f.need_bytes > worst->need_bytes) worst = f;
  };
  consider(plan_memory(plan_of(o, CheckpointPolicy{0}, o.attention_backend)), 1);  // the warm-up
  for (const CheckpointPolicy& pol : o.policies) consider(plan_memory(plan_of(o, pol, o.attention_backend)), most_workers);
  if (worst && !worst->fits)
    throw std::invalid_argument("bench step: " + worst->text + " (refused before allocating); give a smaller " +
                                "--max-len, --num-anchors, --workers or drafter (--model, --drafter-config)");
}

}  // namespace

bool plan_within_tolerance(double planned, double measured) {
  return measured > 0 && std::abs(planned / measured - 1) <= kPlanTolerance;
}

nlohmann::json run_bench_step(const BenchStepOptions& o) {
  for (int64_t w : o.workers)
    if (w < 1 || w > 64) throw util::UsageError("bench step: --workers expects counts in 1..64, got " + std::to_string(w));
  if (o.policies.empty() || o.workers.empty())
    throw util::UsageError("bench step: --policies and --workers need at least one entry each");
  if (o.draft_vocab > 0 && o.draft_vocab >= o.drafter.vocab_size)
    throw std::invalid_argument("bench step: --draft-vocab must be in [1, " + std::to_string(o.drafter.vocab_size - 1) +
                                "] (below the vocabulary size), got " + std::to_string(o.draft_vocab));
  const FamilyRef family = o.drafter.family;
  if (o.draft_vocab > 0 && *drafter::family_of(family).draft_vocab_refusal())
    throw std::invalid_argument(std::string("bench step: --draft-vocab must be 0 with drafter_family ") +
                                family.name() + " (" + family_of(family).draft_vocab_refusal() + ")");
#ifndef DFLASH_BENCH_CUDA
  if (o.cuda) throw std::invalid_argument("bench step: this build has no CUDA support");
#endif
  check_bench_shapes(o);  // before the warm-up allocates anything at these shapes
  // Buffers of 64 KiB and more come from mmap and go back to the OS when freed, so RSS follows live tensors
  // (with a 1 MiB threshold, sub-MiB activations fragment the heap and RSS overstates live memory).
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
  // MKL caches GEMM buffers per thread (several MB at these sizes) outside any tensor; without this RSS
  // grows by that cache and the comparison would measure MKL, not the step. Read at MKL's first call.
  setenv("MKL_DISABLE_FAST_MM", "1", 0);
  MemoryProbe probe;
  probe.cuda = o.cuda;

  // The attention backend, chosen as training chooses it (the check at these shapes, forward and backward).
  const ops::AttentionChoice att =
      choose_drafter_attention(o.attention_backend, o.drafter, o.cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU),
                               o.dtype, {.context_len = o.seq_len, .backward = true});
  const ops::AttentionBackend attention = att.backend;
  std::printf("%s\n", att.line.c_str());
  // Warm-up: thread pools and lazily initialised kernels allocate once, outside the measurement. The second step
  // runs at the measured shapes: in bf16 the CPU GEMMs keep a cache that grows with the shapes during the first
  // step and then stays resident (14-23 MB at cpu-small, docs/BENCHMARKS.md); it is not a tensor of the step, as
  // MKL's GEMM buffers are not (MKL_DISABLE_FAST_MM below), so it belongs to the baseline, not to the peak.
  const DrafterConfig& c = o.drafter;
  run_policy(c, o.dtype, 64, 4, o.kl_weight, o.loss_chunk_rows, CheckpointPolicy{1}, 1, 1, probe, true, 1, attention);
  run_policy(c, o.dtype, o.seq_len, o.anchors, o.kl_weight, o.loss_chunk_rows, CheckpointPolicy{0}, 1, 1, probe, true,
             1, attention);

  const std::string dtype = ops::dtype_name(o.dtype);
  nlohmann::json out;
  out["model"] = o.model_name;
  out["drafter_family"] = family.name();
  out["device"] = o.cuda ? "cuda" : "cpu";
  out["attention_backend"] = ops::attention_backend_name(attention);
  out["settings"] = {{"max_len", o.seq_len},        {"num_anchors", o.anchors}, {"block_size", c.block_size},
                     {"dtype", dtype},              {"kl_weight", o.kl_weight},
                     {"loss_chunk_rows", o.loss_chunk_rows}, {"iters", o.iters}, {"threads", at::get_num_threads()}};
  // A family whose objective has its own teacher term (DSpark's L1), not soft labels: --kl-weight does not apply.
  char kl[64];
  if (*family_cost(c).teacher_label())
    std::snprintf(kl, sizeof kl, "%s", family_cost(c).teacher_label());
  else
    std::snprintf(kl, sizeof kl, "kl_weight %g", o.kl_weight);
  // The CPU kernels' instruction set (DFLASH_CPU_ISA can force a narrower one): step times depend on it.
  const char* isa = kernels::isa_name(kernels::cpu_isa());
  out["cpu_isa"] = isa;
  std::printf("bench step: model %s (%s), seq %lld, %lld anchors x %lld, %s, %s, loss chunk %lld, %d threads, "
              "kernel ISA %s\n",
              o.model_name.c_str(), family.name(), (long long)o.seq_len, (long long)o.anchors,
              (long long)c.block_size, dtype.c_str(), kl, (long long)o.loss_chunk_rows, at::get_num_threads(), isa);
  std::printf("%-10s %7s %14s %12s %14s %14s %9s  %s\n", "policy", "workers", "s/iter (mean)", "steps/s",
              "measured peak", "planned peak", "plan/meas", "same as 1 worker");
  time_policies(o, attention, probe, out);
  // The same switch turns DSpark's fused objective kernel off; the plain-PyTorch step is DFlash's.
  if (o.generic_ce) compare_generic_ce(o, attention, probe, out);
  if (o.draft_vocab > 0) compare_draft_vocab(o, attention, probe, out);
  if (o.vs_dflash && family != baseline_family()) compare_dflash_step(o, attention, probe, out);
  // The plain-PyTorch step is the baseline's (tests/python's reference drafter).
  if (o.reference && !o.cuda && family == baseline_family()) compare_pytorch_reference(o, out);
  if (o.objective_naive) {  // the family's own objective benchmark, if it has one (FamilyModel::benchmark_objective)
    drafter::ObjectiveBenchSetup s;
    s.drafter = c;
    s.anchors = o.anchors;
    s.seq_len = o.seq_len;
    s.loss_chunk_rows = o.loss_chunk_rows;
    s.iters = o.iters;
    s.seed = o.seed;
    s.cuda = o.cuda;
    s.dtype = o.dtype;
    s.reset = [&] { return probe.reset(); };
    s.peak = [&] { return probe.peak(); };
    nlohmann::json objective = drafter::model_of(c).benchmark_objective(s);
    if (!objective.is_null()) out[std::string(family.name()) + "_objective"] = std::move(objective);
  }
  return out;
}

int bench_step_main(const std::vector<std::string>& argv) {
  Args a("bench step", "drafter forward+backward+zero_grad per checkpoint policy: time, measured vs planned memory");
  std::string models;
  for (const auto& n : drafter_preset_names()) models += (models.empty() ? "" : " | ") + n;
  a.option("model", "NAME", "cpu-small", models + " (drafter_presets.h; the targets' drafters need a GPU's memory)");
  a.option("drafter-config", "FILE", "",
           "a drafter config.json instead of --model (e.g. a run's drafter_config.json: the drafter you train)");
  a.option("drafter-family", "NAME", "", "dflash | dspark | dflash2 (default: --drafter-config's architectures, else "
                                          "dflash); a preset takes the family's default settings");
  // The step's shape, as train spells it: a --model preset's own (drafter_presets.h: the CPU shapes' seq 1024, 64
  // anchors, fp32, kl_weight 0.15, chunks of 256 rows) unless given; with --drafter-config, train's defaults.
  const std::vector<std::string> shape_keys = {"max_len", "num_anchors", "dtype", "kl_weight", "loss_chunk_rows"};
  drafter::declare_run_shape(a, shape_keys);
  a.option("iters", "N", "3", "iterations per policy");
  a.option("workers", "LIST", "1",
           "worker threads at once on the device, one replica each (the trainer's topology), e.g. 1,2,3: each count "
           "is timed and its per-worker results compared with the single worker's");
  a.option("policies", "LIST", "none,every:2,layer", "checkpoint policies to run");
  a.option("seed", "N", "0", "RNG seed");
  a.option("device", "NAME", "cpu", "cpu | cuda (GPU runs compare the plan with the caching allocator's peak)");
  a.option("json", "FILE", "", "write results as JSON");
  a.option("threads", "N", "0", "CPU threads (0: every core)");
  a.option("draft-vocab", "K", "0",
           "also time the first policy with the LM head and loss over a draft vocabulary of K rows (0: off)");
  a.option("reference", "0|1", "1",
           "also time the plain-PyTorch drafter step (dense mask, eager autograd) on the same shapes (CPU)");
  a.option("generic-ce", "0|1", "1",
           "also time the first policy with the generic ATen cross-entropy (dspark: objective) instead of the fused "
           "CPU kernel");
  a.option("objective-naive", "0|1", "1",
           "a family with an objective of its own (dspark: the chunked one): also time it against the naive "
           "full-logits one on the same inputs (time, peak memory, loss and gradient difference)");
  a.renamed("dspark-naive", "objective-naive");
  a.option("vs-dflash", "0|1", "1",
           "drafter_family dspark or dflash2: also time DFlash's step on the same shapes and print the family's time "
           "over it next to the planner's FLOP-floor ratio");
  a.option("attention-backend", "NAME", "auto",
           "auto (fused after a self-check against the reference at these shapes, else reference) | fused | reference");
  a.range("iters", 1, 1000000).range("seed", 0, std::numeric_limits<int64_t>::max());
  a.range("draft-vocab", 0, 16777216, " (0: the full vocabulary)").range("reference", 0, 1).range("generic-ce", 0, 1);
  a.range("objective-naive", 0, 1).range("vs-dflash", 0, 1);
  if (!a.parse(argv)) return 0;
  if (a.given("json")) io::check_output_path(a.str("json"), "bench step: --json");  // before the runs
  BenchStepOptions o;
  const std::string cfg_file = a.str("drafter-config");
  const DrafterPreset preset =
      cfg_file.empty() ? drafter_preset(a.str("model"), "bench step: --model") : DrafterPreset{};
  o.drafter = cfg_file.empty() ? preset.drafter : load_drafter_config(cfg_file);
  const FamilyRef family = drafter::family_for_command(
      "bench step", a.str("drafter-family"), cfg_file.empty() ? std::nullopt : std::optional(o.drafter.family), cfg_file);
  // A preset with --drafter-family: the family's default settings.
  o.drafter = drafter_as_family(o.drafter, family,
                                "bench step: --model " + a.str("model") + " as drafter_family " + family.name());
  o.model_name = cfg_file.empty() ? a.str("model") : cfg_file;
  const drafter::RunShape shape =
      drafter::given_run_shape(a, shape_keys, cfg_file.empty() ? preset.shape : drafter::RunShape{});
  o.seq_len = shape.max_len;
  o.anchors = shape.num_anchors;
  o.dtype = ops::scalar_type(shape.dtype);
  o.kl_weight = shape.kl_weight;
  o.loss_chunk_rows = shape.loss_chunk_rows;
  o.iters = a.i64("iters");
  o.workers = a.i64_list("workers");
  o.policies.clear();
  for (const auto& name : a.str_list("policies")) o.policies.push_back(CheckpointPolicy::parse(name));
  o.seed = uint64_t(a.i64("seed"));
  if (a.str("device") != "cpu" && a.str("device") != "cuda")
    throw std::invalid_argument("bench step: --device must be cpu or cuda, got '" + a.str("device") + "'");
  o.cuda = a.str("device") == "cuda";
  o.draft_vocab = a.i64("draft-vocab");
  o.reference = a.on("reference");
  o.generic_ce = a.on("generic-ce");
  o.objective_naive = a.on("objective-naive");
  o.vs_dflash = a.on("vs-dflash");
  o.attention_backend = ops::parse_attention_backend(a.str("attention-backend"), "bench step: --attention-backend");
  ops::set_threads(a.i64("threads"), "bench step: --threads");
  const nlohmann::json out = run_bench_step(o);
  if (!a.str("json").empty()) io::write_file_atomically(a.str("json"), out.dump(2) + "\n");
  return 0;
}

}  // namespace dflash::plan
