// `dflash bench attention` (bench_attention.h): the flags into BenchAttentionOptions, and run_bench_attention, one
// shape and one implementation at a time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define DFLASH_HAVE_CUDA_STATS 1
#endif

#include "anchor_attention.h"
#include "anchor_attention_op.h"
#include "args.h"
#include "attention_baselines.h"
#include "bench_attention.h"
#include "compute_settings.h"
#include "cpu_isa.h"
#include "gemm_rate.h"
#include "output_file.h"
#include "memory_probe.h"
#include "ops_commands.h"
#include "python_driver.h"

namespace dflash::ops {

using util::Args;
namespace {

using Clock = std::chrono::steady_clock;

struct BenchConfig {
  std::string name;
  int64_t S, N, B, Hq, Hkv, D, window;
  at::ScalarType dtype;
};

std::vector<BenchConfig> known_configs() {
  std::vector<BenchConfig> c = {
      {"quick", 256, 32, 16, 4, 2, 64, 0, at::kFloat},
      {"seed-scaled", 2048, 256, 16, 8, 2, 128, 0, at::kFloat},
  };
  // Doubling series around seed-scaled: how each implementation's memory grows with S and with N.
  for (int64_t S : {1024, 4096}) c.push_back({"series-S" + std::to_string(S), S, 256, 16, 8, 2, 128, 0, at::kFloat});
  for (int64_t N : {128, 512}) c.push_back({"series-N" + std::to_string(N), 2048, N, 16, 8, 2, 128, 0, at::kFloat});
  c.push_back({"seed-scaled-window", 2048, 256, 16, 8, 2, 128, 512, at::kFloat});
  c.push_back({"seed-scaled-bf16", 2048, 256, 16, 8, 2, 128, 0, at::kBFloat16});
  // The seed's GPU scale (seq 8000, 1024 anchors) at the released drafters' heads (32 x 128, 8 KV heads: the
  // drafter of the qwen3-8b and qwen3.6-27b presets), and at the heads of the seed's own 27B drafter (24 x 256, 4 KV
  // heads: plan's seed-27b), which no released drafter has.
  c.push_back({"seed", 8000, 1024, 16, 32, 8, 128, 0, at::kBFloat16});
  c.push_back({"seed-27b", 8000, 1024, 16, 24, 4, 256, 0, at::kBFloat16});
  return c;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

struct Row {
  std::string config, impl;
  double fwd_ms = -1, fwdbwd_ms = -1, peak_extra_mb = -1, max_abs_err = -1, predicted_mb = -1;
  double efficiency = -1;  // fused forward / torch.mm, single thread, CPU time
  std::string note;
};

nlohmann::json to_json(const Row& r) {
  const auto num = [](double x) { return x < 0 ? nlohmann::json(nullptr) : nlohmann::json(x); };
  nlohmann::json j = {{"name", r.config},          {"impl", r.impl},
                      {"fwd_ms", num(r.fwd_ms)},   {"fwdbwd_ms", num(r.fwdbwd_ms)},
                      {"peak_extra_mb", num(r.peak_extra_mb)}, {"max_abs_err", num(r.max_abs_err)}};
  if (r.predicted_mb >= 0) j["predicted_mb"] = r.predicted_mb;
  if (r.efficiency >= 0) j["single_thread_fraction_of_mm"] = r.efficiency;
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

// Peak extra memory on the device that runs the work: RSS on the CPU, the caching allocator on CUDA.
class PeakMemory {
 public:
  explicit PeakMemory(at::Device d) : device_(d) {}
  void reset() {
#ifdef DFLASH_HAVE_CUDA_STATS
    if (device_.is_cuda()) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
      base_ = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).allocated_bytes[0].current;
      return;
    }
#endif
    rss_.reset();
  }
  double peak_extra_mb() const {
#ifdef DFLASH_HAVE_CUDA_STATS
    if (device_.is_cuda())
      return double(c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).allocated_bytes[0].peak - base_) /
             (1 << 20);
#endif
    return double(rss_.peak_extra_bytes()) / (1 << 20);
  }

 private:
  at::Device device_;
  util::PeakRss rss_;
  int64_t base_ = 0;
};

void sync(const at::Device& d) {
  if (d.is_cuda()) at::zeros({1}, at::TensorOptions().device(d)).item<float>();  // waits for the stream
}

struct Inputs {
  at::Tensor q, k, v, dout, anchors, keep;
};

// Sorted random anchors with room for a full block, the last 1/16 of blocks padding (keep = false),
// as the trainer produces them.
Inputs make_inputs(const BenchConfig& c, at::Device device, uint64_t seed) {
  at::manual_seed(seed);
  const auto opt = at::TensorOptions().dtype(c.dtype).device(device);
  Inputs in;
  in.q = at::randn({1, c.N * c.B, c.Hq, c.D}, opt);
  in.k = at::randn({1, c.S + c.N * c.B, c.Hkv, c.D}, opt);
  in.v = at::randn({1, c.S + c.N * c.B, c.Hkv, c.D}, opt);
  in.dout = at::randn({1, c.N * c.B, c.Hq, c.D}, opt);
  in.anchors = std::get<0>(at::sort(at::randint(1, c.S + 1, {1, c.N}, at::kLong), 1)).to(device);
  auto keep = at::ones({1, c.N}, at::kBool);
  keep.narrow(1, c.N - c.N / 16, c.N / 16).fill_(false);
  in.keep = keep.to(device);
  return in;
}

using AttnFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

// Times forward (under autograd, as in training) and backward. Memory is taken over the first
// repetition, from just before the forward to the end of the backward (it includes dq, dk, dv).
Row measure(const BenchConfig& c, const std::string& impl, const AttnFn& fn, const Inputs& in, const at::Tensor& ref,
            int64_t reps, bool backward) {
  Row row{c.name, impl};
  const at::Device dev = in.q.device();
  std::vector<double> fwd, total;
  PeakMemory mem(dev);
  for (int64_t r = 0; r <= reps; ++r) {  // repetition 0 warms up caches and measures memory
    auto q = in.q.detach().requires_grad_(backward);
    auto k = in.k.detach().requires_grad_(backward);
    auto v = in.v.detach().requires_grad_(backward);
    if (r == 0) mem.reset();
    sync(dev);
    const auto t0 = Clock::now();
    at::Tensor out = fn(q, k, v);
    sync(dev);
    const double f = ms_since(t0);
    if (backward) {
      auto grads = torch::autograd::grad({out}, {q, k, v}, {in.dout});
      sync(dev);
    }
    const double t = ms_since(t0);
    if (r == 0) {
      row.peak_extra_mb = mem.peak_extra_mb();
      if (ref.defined()) row.max_abs_err = (out.detach().to(at::kDouble).cpu() - ref).abs().max().item<double>();
    } else {
      fwd.push_back(f);
      total.push_back(t);
    }
  }
  row.fwd_ms = median(fwd);
  row.fwdbwd_ms = backward ? median(total) : -1;
  return row;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// GFLOP/s of `fn` per CPU-second of this thread, with one intra-op thread: immune to other processes
// time-slicing the machine, so the kernel/GEMM ratio stays meaningful on a busy box.
double single_thread_gflops(double flops, const std::function<void()>& fn, int reps) {
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double t0 = thread_cpu_ms();
    fn();
    ms.push_back(thread_cpu_ms() - t0);
  }
  at::set_num_threads(saved);
  return flops / (median(ms) * 1e-3) / 1e9;
}

double fused_forward_flops(const Inputs& in, const BenchConfig& c) {
  auto anchors = in.anchors.cpu().contiguous();
  auto keep = in.keep.cpu().contiguous();
  kernels::AnchorAttentionArgs a;
  a.shape = {1, c.N, c.B, c.S, c.Hq, c.Hkv, c.D, c.window, 1.0, kernels::ScalarType::Float32};
  a.anchors = anchors.data_ptr<int64_t>();
  a.anchors_sb = c.N;
  a.keep = keep.data_ptr<bool>();
  a.keep_sb = c.N;
  return kernels::anchor_attention_forward_flops(a);
}

Row run_flex(const BenchConfig& c, const std::string& device, int64_t threads, int64_t reps) {
  Row row{c.name, "flex"};
  const auto r = util::run_python("bench_flex.py", {"--S", std::to_string(c.S), "--N", std::to_string(c.N), "--B",
                                              std::to_string(c.B), "--Hq", std::to_string(c.Hq), "--Hkv",
                                              std::to_string(c.Hkv), "--D", std::to_string(c.D), "--window",
                                              std::to_string(c.window), "--dtype", c.dtype == at::kBFloat16 ? "bf16" : "fp32",
                                              "--device", device, "--threads", std::to_string(threads), "--reps",
                                              std::to_string(reps)});
  const auto last_line = r.stdout_text.substr(r.stdout_text.rfind('{') == std::string::npos ? 0 : r.stdout_text.rfind('{'));
  try {
    const auto j = nlohmann::json::parse(last_line);
    const auto get = [&](const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : -1.0; };
    row.fwd_ms = get("fwd_ms");
    row.fwdbwd_ms = get("fwdbwd_ms");
    row.peak_extra_mb = get("peak_extra_mb");
    row.max_abs_err = get("max_abs_err");
    if (j.contains("note")) row.note = j["note"].get<std::string>();
  } catch (const std::exception&) {
    row.note = "flex driver failed (exit " + std::to_string(r.exit_code) + ")";
  }
  return row;
}

void print_row(const Row& r, const Row* fused) {
  const auto f = [](double x, const char* fmt) {
    char buf[32];
    if (x < 0) return std::string("-");
    std::snprintf(buf, sizeof buf, fmt, x);
    return std::string(buf);
  };
  std::string ratio = "-";
  if (fused && r.impl != "fused") {
    const double ours = fused->fwdbwd_ms > 0 && r.fwdbwd_ms > 0 ? fused->fwdbwd_ms : fused->fwd_ms;
    const double theirs = fused->fwdbwd_ms > 0 && r.fwdbwd_ms > 0 ? r.fwdbwd_ms : r.fwd_ms;
    if (ours > 0 && theirs > 0) ratio = f(theirs / ours, "%.1fx") + (r.fwdbwd_ms > 0 ? "" : " (fwd)");
  }
  std::printf("  %-15s %10s %11s %13s %11s %12s  %s\n", r.impl.c_str(), f(r.fwd_ms, "%.1f").c_str(),
              f(r.fwdbwd_ms, "%.1f").c_str(), f(r.peak_extra_mb, "%.1f").c_str(), f(r.max_abs_err, "%.2e").c_str(),
              ratio.c_str(), r.note.c_str());
  std::fflush(stdout);
}

// The reference's peak extra memory against the fused op's (issue target: within 2x) and the seed's
// per-block SDPA's (at least 20x below), when the rows were measured.
void print_reference_memory(const std::string& config, const std::vector<Row>& rows, nlohmann::json& out) {
  const auto peak = [&](const char* impl) {
    for (const auto& r : rows)
      if (r.impl == impl) return r.peak_extra_mb;
    return -1.0;
  };
  const double fused = peak("fused"), reference = peak("reference"), seed = peak("per_block_sdpa");
  if (reference <= 0) return;
  nlohmann::json j = {{"name", config}, {"reference_peak_extra_mb", reference}};
  std::string line = "  reference peak memory:";
  char buf[96];
  if (fused > 0) {
    std::snprintf(buf, sizeof buf, " %.2fx the fused op's", reference / fused);
    line += buf;
    j["reference_over_fused"] = reference / fused;
  }
  if (seed > 0) {
    std::snprintf(buf, sizeof buf, "%s 1/%.1f of the per-block SDPA's", fused > 0 ? "," : "", seed / reference);
    line += buf;
    j["per_block_sdpa_over_reference"] = seed / reference;
  }
  if (fused > 0 || seed > 0) std::printf("%s\n", line.c_str());
  out["reference_memory"].push_back(j);
}

// The fused op's row, with its GEMM-rate share (and, with cpu_efficiency, its single-thread CPU-time share).
Row run_fused(const BenchAttentionOptions& o, const BenchConfig& c, const Inputs& in, const at::Tensor& ref,
              double flops, double gflops) {
  const double scale = 1.0 / std::sqrt(double(c.D));
  Row row = measure(c, "fused",
                    [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                      return ops::anchor_block_attention(q, k, v, in.anchors, in.keep, c.B, c.window, scale);
                    },
                    in, ref, o.reps, true);
  if (row.fwd_ms <= 0) return row;
  const double rate = flops / (row.fwd_ms * 1e-3) / 1e9;
  char note[200];
  std::snprintf(note, sizeof note, "fwd %.1f GFLOP/s = %.0f%% of torch.mm", rate, 100.0 * rate / gflops);
  row.note = note;
  if (!o.device.is_cuda() && o.cpu_efficiency) {
    at::NoGradGuard ng;
    auto a = at::randn({2048, 2048}), b = at::randn({2048, 2048});
    const double mm1 = single_thread_gflops(2.0 * 2048 * 2048 * 2048, [&] { at::mm(a, b); }, 3);
    const double ours1 = single_thread_gflops(
        flops, [&] { ops::anchor_block_attention(in.q, in.k, in.v, in.anchors, in.keep, c.B, c.window, scale); }, 3);
    std::snprintf(note, sizeof note, "; 1 thread, CPU time: fwd %.0f vs torch.mm %.0f GFLOP/s = %.0f%%", ours1, mm1,
                  100.0 * ours1 / mm1);
    row.note += note;
    row.efficiency = ours1 / mm1;
  }
  return row;
}

// A baseline that materialises what the fused op never does (the dense mask, the per-block gathers): skipped when
// its predicted memory exceeds the limit.
Row run_materialising(const BenchAttentionOptions& o, const std::string& impl, const BenchConfig& c, const Inputs& in,
                      const at::Tensor& ref, double limit_bytes) {
  const double scale = 1.0 / std::sqrt(double(c.D));
  const int64_t elem = c.dtype == at::kFloat ? 4 : 2;
  const double predicted = impl == "dense" ? bench::dense_predicted_bytes(1, c.N * c.B, c.S + c.N * c.B, c.Hq, elem)
                                           : bench::per_block_sdpa_predicted_bytes(1, c.N, c.B, c.S, c.Hq, c.D, elem);
  Row row{c.name, impl};
  if (predicted > limit_bytes) {
    row.predicted_mb = predicted / (1 << 20);
    char note[160];
    std::snprintf(note, sizeof note, "skipped: predicted %.0f MB exceeds the %.0f MB limit", row.predicted_mb,
                  limit_bytes / (1 << 20));
    row.note = note;
    return row;
  }
  row = measure(c, impl,
                [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                  return impl == "dense"
                             ? bench::dense_masked_attention(q, k, v, in.anchors, in.keep, c.B, c.window, scale)
                             : bench::per_block_sdpa_attention(q, k, v, in.anchors, in.keep, c.B, c.window, scale,
                                                               o.chunk_blocks);
                },
                in, ref, o.reps, true);
  row.predicted_mb = predicted / (1 << 20);
  return row;
}

// One shape: its inputs, an fp64 result to measure errors against, then every implementation's row.
void bench_config(const BenchAttentionOptions& o, const BenchConfig& c, double gflops, double limit_bytes,
                  nlohmann::json& out) {
  const Inputs in = make_inputs(c, o.device, 1234);
  const double scale = 1.0 / std::sqrt(double(c.D));
  const double flops = fused_forward_flops(in, c);
  std::printf("[%s] S=%lld N=%lld B=%lld Hq=%lld Hkv=%lld D=%lld window=%lld %s, %.2f GFLOP per forward (visible pairs)\n",
              c.name.c_str(), (long long)c.S, (long long)c.N, (long long)c.B, (long long)c.Hq, (long long)c.Hkv,
              (long long)c.D, (long long)c.window, c10::toString(c.dtype), flops / 1e9);
  // Reference: the fused op in fp64 on the CPU (checked against a dense fp64 mask in the tests).
  at::Tensor ref;
  if (flops < 5e10) {
    at::NoGradGuard ng;
    ref = ops::anchor_block_attention(in.q.cpu().to(at::kDouble), in.k.cpu().to(at::kDouble), in.v.cpu().to(at::kDouble),
                                      in.anchors.cpu(), in.keep.cpu(), c.B, c.window, scale);
  }
  std::printf("  %-15s %10s %11s %13s %11s %12s\n", "impl", "fwd_ms", "fwdbwd_ms", "peak_extra_MB", "max_abs_err",
              "vs fused");
  std::vector<Row> rows;
  for (const auto& impl : o.impls) {
    Row row;
    if (impl == "fused") {
      row = run_fused(o, c, in, ref, flops, gflops);
    } else if (impl == "reference") {
      row = measure(c, impl,
                    [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                      return ops::anchor_block_attention(q, k, v, in.anchors, in.keep, c.B, c.window, scale,
                                                         at::Tensor(), AttentionBackend::Reference);
                    },
                    in, ref, o.reps, true);
    } else if (impl == "dense" || impl == "per_block_sdpa") {
      row = run_materialising(o, impl, c, in, ref, limit_bytes);
    } else {  // "flex"
      row = run_flex(c, o.device.str(), at::get_num_threads(), o.reps);
    }
    rows.push_back(row);
    const Row* fused = nullptr;
    for (const auto& r : rows)
      if (r.impl == "fused") fused = &r;
    print_row(row, fused);
    out["configs"].push_back(to_json(row));
  }
  print_reference_memory(c.name, rows, out);
  std::printf("\n");
}

}  // namespace

nlohmann::json run_bench_attention(const BenchAttentionOptions& o) {
  std::vector<BenchConfig> configs;
  const auto known = known_configs();
  for (const auto& name : o.configs) {
    const auto it = std::find_if(known.begin(), known.end(), [&](const BenchConfig& c) { return c.name == name; });
    if (it == known.end()) throw std::invalid_argument("bench attention: unknown config '" + name + "' (see --help)");
    configs.push_back(*it);
  }
  for (const auto& impl : o.impls)
    if (impl != "fused" && impl != "reference" && impl != "dense" && impl != "per_block_sdpa" && impl != "flex")
      throw std::invalid_argument("bench attention: unknown impl '" + impl +
                                  "' (fused, reference, dense, per_block_sdpa, flex)");
  util::PeakRss::configure_allocator();
  const double limit_bytes = o.mem_limit_bytes > 0 ? o.mem_limit_bytes : 0.6 * double(util::available_memory_bytes());
  const GemmRate gemm = measure_gemm_rate(o.device);
  std::printf("dflash bench attention: device %s, %lld threads, kernel ISA %s\n", o.device.str().c_str(),
              (long long)at::get_num_threads(), kernels::isa_name(kernels::cpu_isa()));
  std::printf("torch.mm %s rate measured now: %.1f GFLOP/s\n\n", gemm.shape.c_str(), gemm.gflops);
  nlohmann::json out = {{"gemm_gflops", gemm.gflops}, {"device", o.device.str()}, {"threads", at::get_num_threads()},
                        {"cpu_isa", kernels::isa_name(kernels::cpu_isa())}, {"configs", nlohmann::json::array()}};
  for (const auto& c : configs) bench_config(o, c, gemm.gflops, limit_bytes, out);
  return out;
}

int bench_attention_main(const std::vector<std::string>& argv) {
  Args args("bench attention",
            "Fused anchor-block attention vs our reference attention (LibTorch ops only), the dense mask, the seed's\n"
            "per-block SDPA and compiled flex_attention, same inputs, one run. Prints forward and forward+backward\n"
            "time (median), peak extra memory, error vs fp64, how many times slower each is than the fused op, and\n"
            "the reference's peak memory against the fused op's and the per-block SDPA's.");
  args.option("configs", "LIST", "quick,seed-scaled,series-S1024,series-S4096,series-N128,series-N512",
              "configs to run: quick, seed-scaled, series-S1024, series-S4096, series-N128, series-N512, "
              "seed-scaled-window, seed-scaled-bf16, seed, seed-27b")
      .option("impls", "LIST", "fused,reference,dense,per_block_sdpa,flex",
              "implementations to compare: fused, reference, dense, per_block_sdpa, flex")
      .option("device", "DEV", "cpu", "cpu or cuda[:N]")
      .option("threads", "N", "0", "CPU threads (0: every core)")
      .option("reps", "N", "3", "timed repetitions (after one warm-up that also measures memory)")
      .option("chunk-blocks", "N", "32", "blocks per chunk of the per-block SDPA baseline")
      .option("mem-limit-gb", "GB", "", "skip a baseline whose predicted memory exceeds this (default: 60% of available)")
      .option("json", "FILE", "", "also write the results as JSON")
      .flag("cpu-efficiency", "also time the fused forward and torch.mm on one thread by CPU time (robust on a busy machine)");
  args.range("reps", 1, 1000000).range("chunk-blocks", 1, 1000000).range("mem-limit-gb", util::closed(0.001, 1e6));
  if (!args.parse(argv)) return 0;
  BenchAttentionOptions o;
  o.configs = args.str_list("configs");
  o.impls = args.str_list("impls");
  o.device = parse_device(args.str("device"), "bench attention: --device");
  o.reps = args.i64("reps");
  o.chunk_blocks = args.i64("chunk-blocks");
  if (args.given("mem-limit-gb")) o.mem_limit_bytes = args.f64("mem-limit-gb") * 1e9;
  o.cpu_efficiency = args.on("cpu-efficiency");
  set_threads(args.i64("threads"), "bench attention: --threads");
  // Before the runs: a folder, a missing folder or an empty path fails now, not after minutes of timing.
  if (args.given("json")) util::check_output_path(args.str("json"), "bench attention: --json");
  const nlohmann::json out = run_bench_attention(o);
  if (args.given("json")) {
    util::write_file_atomically(args.str("json"), out.dump(2) + "\n");  // a device or FIFO: written as a stream
    std::printf("wrote %s\n", args.str("json").c_str());
  }
  return 0;
}

}  // namespace dflash::ops
