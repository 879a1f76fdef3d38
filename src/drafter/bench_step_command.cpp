// `dflash bench step`: the seed's failing step at CPU size: drafter forward + backward + zero_grad with soft
// labels, per checkpoint policy; time per iteration, measured peak memory (peak RSS increase) and the
// planner's prediction side by side. DFLASH_BENCH_TRACE=1 prints live/peak memory after forward and backward.
#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#ifdef DFLASH_BENCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "args.h"
#include "compute_settings.h"
#include "drafter_commands.h"
#include "drafter_model.h"
#include "memory_planner.h"
#include "python_driver.h"

namespace dflash::drafter {

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

DrafterConfig bench_config(const std::string& name) {
  if (name == "qwen3-8b" || name == "qwen3.6-27b") return plan_preset(name).cfg;  // GPU scale
  DrafterConfig c;
  c.block_size = 16;
  c.num_target_layers = 12;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  if (name == "cpu-small") {
    c.hidden_size = 256, c.intermediate_size = 768, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 64, c.num_hidden_layers = 2, c.vocab_size = 8192;
    c.layer_types = {"full_attention", "full_attention"};
  } else if (name == "cpu-sliding") {
    c.hidden_size = 384, c.intermediate_size = 1024, c.num_attention_heads = 6, c.num_key_value_heads = 2;
    c.head_dim = 64, c.num_hidden_layers = 3, c.vocab_size = 12288, c.sliding_window = 256;
    c.layer_types = {"sliding_attention", "full_attention", "sliding_attention"};
  } else if (name == "cpu-vocab") {
    c.hidden_size = 192, c.intermediate_size = 512, c.num_attention_heads = 4, c.num_key_value_heads = 1;
    c.head_dim = 48, c.num_hidden_layers = 2, c.vocab_size = 32768, c.tie_word_embeddings = true;
    c.layer_types = {"full_attention", "full_attention"};
  } else {
    throw std::invalid_argument("bench step: unknown --model '" + name +
                                "' (cpu-small, cpu-sliding, cpu-vocab, or qwen3-8b / qwen3.6-27b on a GPU)");
  }
  c.mask_token_id = c.vocab_size - 1;
  c.target_layer_ids = default_target_layer_ids(c.num_target_layers, c.num_hidden_layers);
  return c;
}

struct StepResult {
  std::vector<double> seconds;
  double measured_bytes = 0;
  double loss = 0;
};

// Everything the step needs is created after the peak reset, so the measured increase covers weights,
// frozen embedding/LM head, inputs, activations and gradients -- what the planner predicts with no optimizer.
StepResult run_policy(const DrafterConfig& c, at::ScalarType dtype, int64_t seq, int64_t anchors, double kl,
                      int64_t chunk, CheckpointPolicy policy, int64_t iters, uint64_t seed, const MemoryProbe& probe,
                      bool fused_ce = true) {
  StepResult r;
  const int64_t baseline = probe.reset();
  const at::Device dev = probe.cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    DrafterWeights w = init_drafter_weights(c, dtype, seed);
    if (probe.cuda) {
      // Built on the CPU (seeded), moved one tensor at a time.
      for (auto* t : {&w.fc, &w.hidden_norm, &w.norm}) *t = t->to(dev);
      for (auto& l : w.layers)
        for (auto& t : l.t) t = t.to(dev);
    }
    w.set_requires_grad(true);
    const auto opts = at::TensorOptions().dtype(dtype);
    auto on_dev = [&](at::Tensor t) { return probe.cuda ? t.to(dev) : t; };
    FrozenTarget t;
    // Target-like scale (std 0.02) keeps logits, and so the loss, in a realistic range.
    t.embed = on_dev(at::randn({c.vocab_size, c.hidden_size}, gen, opts).mul_(0.02));
    t.lm_head = c.tie_word_embeddings ? t.embed : on_dev(at::randn({c.vocab_size, c.hidden_size}, gen, opts).mul_(0.02));
    const int64_t nH = int64_t(c.target_layer_ids.size()) * c.hidden_size;
    const at::Tensor feats = on_dev(at::randn({1, seq, nH}, gen, opts));
    const at::Tensor last = kl > 0 ? on_dev(at::randn({1, seq, c.hidden_size}, gen, opts)) : at::Tensor();
    const at::Tensor ids = on_dev(at::randint(0, c.vocab_size - 1, {1, seq}, gen, at::kLong));
    at::Tensor loss_mask = at::ones({1, seq}, at::kBool);
    loss_mask.narrow(1, 0, seq / 8).fill_(false);  // a prompt
    std::mt19937_64 rng(seed);
    const AnchorSample s_cpu = sample_anchors(loss_mask, anchors, rng);
    const AnchorSample s{on_dev(s_cpu.anchors), on_dev(s_cpu.keep)};
    loss_mask = on_dev(loss_mask);
    DrafterLossOptions opt;
    opt.gamma = default_loss_gamma(c.block_size);
    opt.chunk.chunk_rows = chunk;
    opt.chunk.kl_weight = kl;
    opt.chunk.fused_ce = fused_ce;
    const BlockBatch blocks = build_block_batch(ids, loss_mask, s, c.block_size, c.mask_token_id, opt.gamma);
    if (std::getenv("DFLASH_BENCH_TRACE"))
      std::fprintf(stderr, "  before forward: rss %.1f MB hwm %.1f MB\n", (probe.now() - baseline) / 1e6,
                   (probe.peak() - baseline) / 1e6);
    for (int64_t it = 0; it < iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      {
        DrafterLossResult res = drafter_loss(c, w, t, feats, last, s, blocks, opt, policy);
        if (std::getenv("DFLASH_BENCH_TRACE"))
          std::fprintf(stderr, "  after forward: rss %.1f MB hwm %.1f MB\n", (probe.now() - baseline) / 1e6,
                       (probe.peak() - baseline) / 1e6);
        res.loss.backward();
        if (std::getenv("DFLASH_BENCH_TRACE"))
          std::fprintf(stderr, "  after backward: rss %.1f MB hwm %.1f MB\n", (probe.now() - baseline) / 1e6,
                       (probe.peak() - baseline) / 1e6);
        r.loss = res.loss.item<double>();
      }
      for (auto& p : w.parameters()) p.mutable_grad() = at::Tensor();  // zero_grad(set_to_none=True)
#ifdef DFLASH_BENCH_CUDA
      if (probe.cuda) c10::cuda::device_synchronize();
#endif
      r.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  r.measured_bytes = double(probe.peak() - baseline);
  return r;
}

}  // namespace

int bench_step_main(const std::vector<std::string>& argv) {
  Args a("bench step", "drafter forward+backward+zero_grad per checkpoint policy: time, measured vs planned memory");
  a.option("model", "NAME", "cpu-small", "cpu-small | cpu-sliding | cpu-vocab");
  a.option("drafter-config", "FILE", "",
           "a drafter config.json instead of --model (e.g. a run's drafter_config.json: the drafter you train)");
  a.option("seq-len", "S", "1024", "context tokens");
  a.option("anchors", "N", "64", "blocks");
  a.option("dtype", "DTYPE", "fp32", "fp32 | bf16 | fp64");
  a.option("kl-weight", "X", "0.15", "soft-label weight");
  a.option("loss-chunk", "ROWS", "256", "rows per loss chunk");
  a.option("iters", "N", "3", "iterations per policy");
  a.option("policies", "LIST", "none,every:2,layer", "checkpoint policies to run");
  a.option("seed", "N", "0", "RNG seed");
  a.option("device", "NAME", "cpu", "cpu | cuda (GPU runs compare the plan with the caching allocator's peak)");
  a.option("json", "FILE", "", "write results as JSON");
  a.option("threads", "N", "0", "CPU threads (0: every core)");
  a.option("reference", "0|1", "1",
           "also time the plain-PyTorch drafter step (dense SPEC mask, eager autograd) on the same shapes (CPU)");
  a.option("generic-ce", "0|1", "1",
           "also time the first policy with the generic ATen cross-entropy instead of the fused CPU kernel");
  if (!a.parse(argv)) return 0;
  ops::set_threads(a.i64("threads"), "bench step: --threads");
  MemoryProbe probe;
  probe.cuda = a.str("device") == "cuda";
  if (a.str("device") != "cpu" && !probe.cuda)
    throw std::invalid_argument("bench step: --device must be cpu or cuda, got '" + a.str("device") + "'");
#ifndef DFLASH_BENCH_CUDA
  if (probe.cuda) throw std::invalid_argument("bench step: this build has no CUDA support");
#endif
  // Buffers of 64 KiB and more come from mmap and go back to the OS when freed, so RSS follows live tensors
  // (with a 1 MiB threshold, sub-MiB activations fragment the heap and RSS overstates live memory).
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
  // MKL caches GEMM buffers per thread (several MB at these sizes) outside any tensor; without this RSS
  // grows by that cache and the comparison would measure MKL, not the step. Read at MKL's first call.
  setenv("MKL_DISABLE_FAST_MM", "1", 0);

  const std::string cfg_file = a.str("drafter-config");
  const DrafterConfig c = cfg_file.empty() ? bench_config(a.str("model")) : load_drafter_config(cfg_file);
  const std::string model_name = cfg_file.empty() ? a.str("model") : cfg_file;
  const auto dtype = ops::parse_dtype(a.str("dtype"), "bench step: --dtype");
  const int64_t seq = a.i64("seq-len"), anchors = a.i64("anchors"), chunk = a.i64("loss-chunk");
  const int64_t iters = a.i64("iters");
  const double kl = a.f64("kl-weight");
  // Warm-up on a tiny shape: thread pools and lazily initialised kernels allocate once, outside the measurement.
  run_policy(c, dtype, 64, 4, kl, chunk, CheckpointPolicy{1}, 1, 1, probe);
  run_policy(c, dtype, 64, 4, kl, chunk, CheckpointPolicy{0}, 1, 1, probe);

  nlohmann::json out;
  out["model"] = model_name;
  out["device"] = a.str("device");
  out["settings"] = {{"seq_len", seq}, {"anchors", anchors}, {"block_size", c.block_size}, {"dtype", a.str("dtype")},
                     {"kl_weight", kl}, {"loss_chunk_rows", chunk}, {"iters", iters}, {"threads", at::get_num_threads()}};
  std::printf("bench step: model %s, seq %lld, %lld anchors x %lld, %s, kl_weight %g, loss chunk %lld, %d threads\n",
              model_name.c_str(), (long long)seq, (long long)anchors, (long long)c.block_size, a.str("dtype").c_str(),
              kl, (long long)chunk, at::get_num_threads());
  std::printf("%-10s %14s %14s %14s %9s\n", "policy", "s/iter (mean)", "measured peak", "planned peak", "plan/meas");
  for (const auto& pol_name : a.str_list("policies")) {
    const CheckpointPolicy pol = CheckpointPolicy::parse(pol_name);
    const StepResult r = run_policy(c, dtype, seq, anchors, kl, chunk, pol, iters, uint64_t(a.i64("seed")), probe);
    PlanSettings ps;
    ps.cfg = c;
    ps.seq_len = seq;
    ps.num_anchors = anchors;
    ps.dtype_bytes = int64_t(c10::elementSize(dtype));
    ps.checkpoint_every = pol.every;
    ps.loss_chunk_rows = chunk;
    ps.kl_weight = kl;
    ps.optimizer = "none";
    ps.master_fp32 = false;
    ps.device = probe.cuda ? "cuda" : "cpu";
    const MemoryPlan p = plan_memory(ps);
    double mean = 0;
    for (double t : r.seconds) mean += t / double(r.seconds.size());
    std::printf("%-10s %14.3f %14s %14s %9.3f\n", pol.name().c_str(), mean, human_bytes(r.measured_bytes).c_str(),
                human_bytes(p.peak_bytes).c_str(), p.peak_bytes / r.measured_bytes);
    out["runs"].push_back({{"policy", pol.name()}, {"seconds", r.seconds}, {"mean_seconds", mean},
                           {"measured_peak_bytes", r.measured_bytes}, {"planned_peak_bytes", p.peak_bytes},
                           {"planned_peak_phase", p.peak_phase}, {"ratio", p.peak_bytes / r.measured_bytes},
                           {"loss", r.loss}, {"plan", plan_to_json(p)}});
  }
  if (a.on("generic-ce") && !out["runs"].empty()) {
    // The first policy again with the generic ATen cross-entropy passes instead of the fused CPU kernel (the
    // kernel only runs for hard labels on CPU in float32/bf16; elsewhere both rows time the same code).
    const auto& ours = out["runs"][0];
    const CheckpointPolicy pol = CheckpointPolicy::parse(ours["policy"].get<std::string>());
    const StepResult r = run_policy(c, dtype, seq, anchors, kl, chunk, pol, iters, uint64_t(a.i64("seed")), probe, false);
    double mean = 0;
    for (double t : r.seconds) mean += t / double(r.seconds.size());
    std::printf("%-10s %14.3f %14s %14s %9s   generic cross-entropy (ours %s: %.2fx faster)\n", "generic-ce", mean,
                human_bytes(r.measured_bytes).c_str(), "-", "-", ours["policy"].get<std::string>().c_str(),
                mean / ours["mean_seconds"].get<double>());
    out["generic_ce"] = {{"mean_seconds", mean}, {"seconds", r.seconds}, {"measured_peak_bytes", r.measured_bytes},
                         {"loss", r.loss}};
  }
  if (a.on("reference") && !probe.cuda && !out["runs"].empty()) {
    // The plain-PyTorch drafter our tests compare against, timed in its own process on the same shapes.
    std::string types;
    for (const auto& t : c.layer_types) types += (types.empty() ? "" : ",") + t;
    const auto num = [](int64_t x) { return std::to_string(x); };
    const auto r = util::run_python(
        "bench_reference_step.py",
        {"--hidden", num(c.hidden_size), "--intermediate", num(c.intermediate_size), "--heads", num(c.num_attention_heads),
         "--kv-heads", num(c.num_key_value_heads), "--head-dim", num(c.head_dim), "--layers", num(c.num_hidden_layers),
         "--vocab", num(c.vocab_size), "--block", num(c.block_size), "--seq", num(seq), "--anchors", num(anchors),
         "--features", num(int64_t(c.target_layer_ids.size()) * c.hidden_size), "--iters", num(iters), "--threads",
         num(at::get_num_threads()), "--window", num(c.sliding_window), "--layer-types", types, "--kl-weight",
         std::to_string(kl), "--dtype", a.str("dtype")});
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
  if (!a.str("json").empty()) {
    std::ofstream f(a.str("json"));
    f << out.dump(2) << "\n";
    if (!f) throw std::invalid_argument(a.str("json") + ": cannot write");
  }
  return 0;
}

}  // namespace dflash::drafter
