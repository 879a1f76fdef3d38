// `dflash bench producer`: what target replicas and pipelined stages buy, measured side by side in one run on the
// CPU (docs/BENCHMARKS.md):
//   1. the step producer alone (online: collate, target forward, anchors, blocks) with 1 replica vs 2 replicas
//      ("cpu" vs "cpu;cpu"), each target thread at --threads intra-op threads;
//   2. one replica of 2 CPU pipeline stages: its stages in turn on one thread vs a thread per stage;
//   3. whole training runs with target_devices "cpu" vs "cpu;cpu" and a cheap drafter (a target-bound setting):
//      steps/s and the busy fractions from metrics.jsonl (in --work-dir, removed again when a run fails;
//      the training test hooks, DFLASH_TEST_FAIL_WORKER etc., apply to these runs too).
// Samples are random tokens (the target's speed does not depend on which).
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "run_shape.h"
#include "atomic_output.h"
#include "compute_settings.h"
#include "created_folder.h"
#include "drafter_from_target.h"
#include "sample_source.h"
#include "step_producer.h"
#include "target_loader.h"
#include "train_commands.h"
#include "train_hooks_env.h"
#include "trainer.h"

namespace fs = std::filesystem;

namespace dflash::train {

using util::Args;

namespace {

// `count` samples of `len` random tokens, the loss on all but the first eighth (a prompt).
class RandomTokens : public SampleSource {
 public:
  RandomTokens(int64_t count, int64_t len, int64_t vocab) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    for (int64_t i = 0; i < count; ++i) {
      Sample s;
      s.input_ids = at::randint(0, vocab, {len}, gen, at::kLong);
      s.loss_mask = at::arange(len) >= len / 8;
      samples_.push_back(s);
    }
  }
  int64_t size() const override { return int64_t(samples_.size()); }
  Sample get(int64_t i) const override { return samples_.at(size_t(i)); }
  bool has_features() const override { return false; }
  std::string describe() const override { return "random tokens"; }
  void write_jsonl(const std::string& path) const {
    std::ofstream f(path);
    for (const Sample& s : samples_) {
      nlohmann::json j;
      j["input_ids"] = std::vector<int64_t>(s.input_ids.data_ptr<int64_t>(), s.input_ids.data_ptr<int64_t>() + s.input_ids.numel());
      const at::Tensor m = s.loss_mask.to(at::kLong);
      j["loss_mask"] = std::vector<int64_t>(m.data_ptr<int64_t>(), m.data_ptr<int64_t>() + m.numel());
      f << j.dump() << "\n";
    }
  }

 private:
  std::vector<Sample> samples_;
};

struct ProducerRun {
  double samples_per_s = 0, busy = 0;
};

// The producer over `micro` micro-batches of one sample (one worker, one micro-batch a step) from `targets`.
ProducerRun time_producer(const SampleSource& source, const std::vector<const models::TargetModel*>& targets,
                          const drafter::DrafterConfig& dc, int64_t micro, int64_t len, int64_t threads, bool pipeline) {
  ProducerSettings ps;
  ps.dcfg = dc;
  ps.max_len = len;
  ps.num_anchors = 32;
  ps.threads = threads;
  ps.pipeline = pipeline;
  ps.queue_depth = 2;
  const auto t0 = std::chrono::steady_clock::now();
  StepProducer producer(ps, source, targets, 0, micro, 0);
  int64_t got = 0;
  while (producer.next()) ++got;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (got != micro) throw std::logic_error("bench producer: " + std::to_string(got) + " of " + std::to_string(micro));
  return {double(micro) / secs, producer.busy_seconds() / secs};
}

// The combined GEMM rate of `k` threads of one intra-op thread each doing the same products at once: what the
// machine allows two replicas or stages at best (on a machine shared with other work, less than 2x).
double gemm_rate(int k, int64_t size, int iters) {
  const at::Tensor x = at::randn({size, size}), y = at::randn({size, size});
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < k; ++i)
    ts.emplace_back([&] {
      ops::set_thread_local_threads(1);
      for (int it = 0; it < iters; ++it) (void)at::mm(x, y);
    });
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * double(size) * double(size) * double(size) * double(k) * double(iters) / secs;
}

struct WholeRun {
  double steps_per_s = 0, producer_busy = 0, drafter_busy = 0;
};

// A training run of `steps` steps; the rate over steps 2.. (metrics.jsonl's elapsed_s), so loading is left out.
WholeRun time_training(TrainConfig c, const std::string& target_devices, const std::string& out) {
  c.target_devices = util::read_device_grid_setting(target_devices, "bench producer: target_devices");
  c.out = out;
  if (run_training(c, hooks_from_environment()) != 0) throw std::runtime_error("bench producer: the training run " + out + " failed");
  std::ifstream f(fs::path(out) / "metrics.jsonl");
  std::vector<nlohmann::json> m;
  for (std::string line; std::getline(f, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("event")) m.push_back(std::move(j));  // step lines only (not the attention backend's events)
  }
  if (m.size() < 3) throw std::logic_error("bench producer: too few metrics lines in " + out);
  WholeRun r;
  r.steps_per_s = double(m.size() - 1) / (m.back()["elapsed_s"].get<double>() - m.front()["elapsed_s"].get<double>());
  for (size_t i = 1; i < m.size(); ++i) {
    r.producer_busy += m[i]["producer_busy"].get<double>() / double(m.size() - 1);
    r.drafter_busy += m[i]["drafter_busy"].get<double>() / double(m.size() - 1);
  }
  return r;
}

}  // namespace

int bench_producer_main(const std::vector<std::string>& argv) {
  Args a("bench producer", "target replicas and pipelined stages vs one replica and stages in turn (CPU, one run)");
  a.option("target", "PATH", "", "the target (HF folder or .gguf)");
  drafter::declare_run_shape(a, {"max_len"});  // tokens per sample, as train spells it
  a.option("micro-batches", "N", "16", "micro-batches (one sample each) the producer makes per configuration");
  a.option("threads", "N", "1", "intra-op threads of each target thread (replica or stage)");
  // The target's dtype, as train spells it (target_dtype); train's --dtype is the drafter's, so the old spelling here
  // stops naming the new one.
  a.option("target-dtype", "DTYPE", "fp32", "the target's dtype: fp32 | bf16 | fp16 | fp64");
  a.renamed("dtype", "target-dtype");
  a.option("steps", "N", "12", "steps of each whole training run (0: skip the runs)");
  a.option("work-dir", "DIR", "bench-producer-runs", "a new folder for the training runs' outputs");
  a.range("micro-batches", 1, 1000000).range("threads", 0, 1024, " (0: every core)");
  a.range("steps", 0, 1000000, " (0: skip the runs)");
  if (!a.parse(argv)) return 0;
  a.require("target");
  const int64_t len = a.i64("max-len"), micro = a.i64("micro-batches"), threads = a.i64("threads"), steps = a.i64("steps");
  if (len < 16 || micro < 2 || threads < 1 || (steps != 0 && steps < 3))
    throw std::invalid_argument("bench producer: need --max-len >= 16, --micro-batches >= 2, --threads >= 1, "
                                "--steps 0 or >= 3");
  const std::string work = a.str("work-dir");
  if (steps > 0 && fs::exists(work))
    throw std::invalid_argument("bench producer: --work-dir '" + work + "' exists; give a new folder");
  if (steps > 0) io::check_output_folder(work, "bench producer: --work-dir");  // a path under a file: now, not later
  models::TargetLoadOptions one_stage;
  one_stage.dtype = ops::parse_dtype(a.str("target-dtype"), "bench producer: --target-dtype");
  const models::TargetModel target = models::load_target(a.str("target"), one_stage);
  const models::TargetConfig& tc = target.config();
  if (tc.num_hidden_layers < 2) throw std::invalid_argument("bench producer: the target needs 2 layers for 2 stages");
  const models::TargetModel second = target.replicate({at::kCPU});  // shares the weights, as "cpu;cpu" does
  models::TargetLoadOptions two_stages = one_stage;
  two_stages.stages = models::split_layers(int(tc.num_hidden_layers), {at::kCPU, at::kCPU});
  const models::TargetModel pipeline = models::load_target(a.str("target"), two_stages);
  drafter::DrafterConfig dc = drafter::drafter_config_for_target(tc, 1, 16, tc.vocab_size - 1, {});
  RandomTokens source(std::max<int64_t>(micro, 64), len, tc.vocab_size);

  std::printf("bench producer: %s (%lld layers, hidden %lld), %s, %lld tokens per sample, %lld micro-batches, "
              "%lld intra-op thread(s) per target thread\n",
              a.str("target").c_str(), (long long)tc.num_hidden_layers, (long long)tc.hidden_size,
              a.str("target-dtype").c_str(), (long long)len, (long long)micro, (long long)threads);
  gemm_rate(1, 512, 4);  // warm-up: thread pools, lazily built kernels
  const double g1 = gemm_rate(1, 1024, 20), g2 = gemm_rate(2, 1024, 20);
  std::printf("\nthis machine now: GEMM 1024^3 on 1 thread %.1f GFLOP/s, 2 threads at once %.1f GFLOP/s: %.2fx is the "
              "ceiling of the ratios below\n", g1 / 1e9, g2 / 1e9, g2 / g1);
  time_producer(source, {&target}, dc, 2, len, threads, true);
  const ProducerRun r1 = time_producer(source, {&target}, dc, micro, len, threads, true);
  const ProducerRun r2 = time_producer(source, {&target, &second}, dc, micro, len, threads, true);
  std::printf("\n%-44s %12s %10s\n", "producer", "samples/s", "busy");
  std::printf("%-44s %12.3f %9.0f%%\n", "1 replica (cpu)", r1.samples_per_s, 100 * r1.busy);
  std::printf("%-44s %12.3f %9.0f%%\n", "2 replicas (cpu;cpu)", r2.samples_per_s, 100 * r2.busy);
  std::printf("%-44s %12.2fx\n", "2 replicas / 1", r2.samples_per_s / r1.samples_per_s);
  const ProducerRun s1 = time_producer(source, {&pipeline}, dc, micro, len, threads, false);
  const ProducerRun s2 = time_producer(source, {&pipeline}, dc, micro, len, threads, true);
  std::printf("%-44s %12.3f %9.0f%%\n", "2 stages (cpu,cpu) in turn, one thread", s1.samples_per_s, 100 * s1.busy);
  std::printf("%-44s %12.3f %9.0f%%\n", "2 stages (cpu,cpu) pipelined, a thread each", s2.samples_per_s, 100 * s2.busy);
  std::printf("%-44s %12.2fx\n", "pipelined / in turn", s2.samples_per_s / s1.samples_per_s);
  if (steps == 0) return 0;

  // Whole runs: a one-layer drafter with 8 anchors of 4 tokens per sample, one worker: the target is the
  // bottleneck, which is where replicas help.
  util::CreatedFolder made(work);  // a failed run takes the folder (and parents it made) away again
  const std::string data = (fs::path(work) / "samples.jsonl").string();
  source.write_jsonl(data);
  TrainConfig c;
  c.target = a.str("target");
  c.data = data;
  c.mask_token_id = tc.vocab_size - 1;
  c.drafter_layers = 1;
  c.block_size = 4;
  c.num_anchors = 8;
  c.max_len = len;
  c.steps = steps;
  c.dtype = util::Dtype::F32;
  c.target_dtype = util::parse_dtype(a.str("target-dtype"), "bench producer: --target-dtype");
  c.threads = threads;
  c.log_every = 1;
  c.checkpoint_every = steps;
  const WholeRun w1 = time_training(c, "cpu", (fs::path(work) / "r1").string());
  const WholeRun w2 = time_training(c, "cpu;cpu", (fs::path(work) / "r2").string());
  made.keep();
  std::printf("\n%-44s %12s %10s %10s\n", "training run (steps 2..)", "steps/s", "target", "drafter");
  std::printf("%-44s %12.3f %9.0f%% %9.0f%%\n", "target_devices cpu", w1.steps_per_s, 100 * w1.producer_busy,
              100 * w1.drafter_busy);
  std::printf("%-44s %12.3f %9.0f%% %9.0f%%\n", "target_devices cpu;cpu", w2.steps_per_s, 100 * w2.producer_busy,
              100 * w2.drafter_busy);
  std::printf("%-44s %12.2fx\n", "2 replicas / 1", w2.steps_per_s / w1.steps_per_s);
  return 0;
}

}  // namespace dflash::train
