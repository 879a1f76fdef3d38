// `dflash bench flops`: the FLOP model of `plan --node` against measured time on this machine. One run measures
// a large matrix product (the machine's attainable GEMM rate at these threads), one target forward over a
// sequence and one drafter training step (forward + backward) at the same shapes, and prints each part's
// predicted FLOPs, measured time, achieved rate and efficiency = achieved / GEMM rate. On the CPU this is the
// efficiency factor the planner would need here; it says how much non-GEMM work (norms, RoPE, the delta rule,
// softmax, copies) the model leaves out at these shapes, not what a GPU achieves.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "atomic_output.h"
#include "compute_settings.h"
#include "plan_commands.h"
#include "drafter_from_target.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "input_file.h"
#include "run_shape.h"
#include "node_planner.h"
#include "random_target.h"
#include "target_cost.h"
#include "target_loader.h"

namespace dflash::plan {

using namespace dflash::drafter;  // the drafter this layer plans and measures

using util::Args;

namespace {

// Median wall time of `repeats` calls of f after one warm-up call.
template <typename F>
double median_seconds(int64_t repeats, F f) {
  f();
  std::vector<double> t;
  for (int64_t i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int bench_flops_main(const std::vector<std::string>& argv) {
  Args a("bench flops", "the FLOP model of plan --node against measured time: target forward and drafter step vs a "
                        "GEMM's rate on this machine");
  a.option("target", "PATH", "", "a target to time (HF folder or .gguf)");
  a.option("target-config", "FILE", "", "or an architecture's config.json: timed with random weights");
  drafter::declare_run_shape(a, {"max_len", "num_anchors"});  // the step's shape, as train spells it
  a.option("drafter-layers", "N", "1", "layers of the drafter built for the target");
  // As train spells the target's dtype (target_dtype; train's --dtype is the drafter's): the old spelling stops
  // naming the new one.
  a.option("target-dtype", "DTYPE", "fp32", "the target's dtype: fp32 | bf16 | fp64 (the drafter and the GEMM run in it too)");
  a.renamed("dtype", "target-dtype");
  a.option("gemm-size", "N", "1024", "the reference GEMM is N x N x N");
  a.option("repeats", "N", "3", "timed calls per part (median; one warm-up call first)");
  a.option("threads", "N", "0", "intra-op threads (0: every core)");
  a.option("json", "FILE", "", "also write the results as JSON");
  a.range("drafter-layers", 1, 256);
  a.range("gemm-size", 1, 65536).range("repeats", 1, 1000000);
  if (!a.parse(argv)) return 0;
  if (a.given("json")) io::check_output_path(a.str("json"), "bench flops: --json");  // before the runs
  if (a.str("target").empty() == a.str("target-config").empty())
    throw std::invalid_argument("bench flops: give --target PATH or --target-config FILE");
  const int64_t threads = ops::set_threads(a.i64("threads"), "bench flops: --threads");
  const auto dtype = ops::parse_dtype(a.str("target-dtype"), "bench flops: --target-dtype");
  const int64_t S = a.i64("max-len"), N = a.i64("num-anchors"), repeats = a.i64("repeats"), n = a.i64("gemm-size");
  if (S < 2 || N < 1 || N > S || repeats < 1 || n < 16)
    throw std::invalid_argument("bench flops: need --max-len >= 2, 1 <= --num-anchors <= --max-len, --repeats >= 1, "
                                "--gemm-size >= 16");
  at::NoGradGuard no_grad;

  models::TargetLoadOptions opts;
  opts.dtype = dtype;
  const std::string name = a.str("target").empty() ? a.str("target-config") : a.str("target");
  models::TargetModel target = [&] {
    if (!a.str("target").empty()) return models::load_target(a.str("target"), opts);
    const std::string text = io::read_regular_file(a.str("target-config"), 64 << 20);
    std::string what = "'";  // (built piecewise: GCC 12's -Wrestrict false positive on `"'" + std::string`)
    (what += a.str("target-config")) += "'";
    return models::random_target(models::parse_target_config(text, what), opts, 0);
  }();
  const models::TargetConfig& tc = target.config();

  // The machine's GEMM rate at these threads.
  const at::Tensor x = at::randn({n, n}).to(dtype), y = at::randn({n, n}).to(dtype);
  const double gemm_s = median_seconds(std::max<int64_t>(repeats, 5), [&] { (void)at::mm(x, y); });
  const double gemm_rate = 2.0 * double(n) * double(n) * double(n) / gemm_s;

  // The target forward of one sequence, as the trainer's producer runs it (features of the drafter's layers).
  DrafterConfig dc = drafter_config_for_target(tc, a.i64("drafter-layers"), drafter::RunShape{}.block_size,
                                               tc.vocab_size - 1, {});
  dc.validate("drafter config for " + name);
  std::vector<int> capture(dc.target_layer_ids.begin(), dc.target_layer_ids.end());
  const at::Tensor ids = at::randint(0, tc.vocab_size, {1, S}, at::kLong);
  const double target_s = median_seconds(repeats, [&] { (void)target.forward(ids, nullptr, capture, false, false); });
  const double target_flops = models::target_forward_flops(tc, S, false).total();

  // One drafter step (forward + backward) at the same length, anchors over the answer part (after S / 8).
  PlanSettings ps;
  ps.cfg = dc;
  ps.seq_len = S;
  ps.num_anchors = N;
  ps.kl_weight = 0;
  const double drafter_flops = drafter_step_flops(ps).total();
  DrafterWeights w = init_drafter_weights(dc, dtype, 0);
  w.set_requires_grad(true);
  FrozenTarget frozen{target.embed_weight(), target.lm_head_weight()};
  const at::Tensor feats = at::randn({1, S, int64_t(dc.target_layer_ids.size()) * dc.hidden_size}).to(dtype);
  at::Tensor loss_mask = at::ones({1, S}, at::kBool);
  loss_mask.narrow(1, 0, S / 8).fill_(false);
  std::mt19937_64 rng(0);
  const AnchorSample anchors = sample_anchors(loss_mask, N, rng);
  const BlockBatch blocks = build_block_batch(ids, loss_mask, anchors, dc.block_size, dc.mask_token_id,
                                              default_loss_gamma(dc.block_size));
  DrafterLossOptions lo;
  lo.gamma = default_loss_gamma(dc.block_size);
  const double drafter_s = median_seconds(repeats, [&] {
    at::AutoGradMode grad(true);
    drafter_loss(dc, w, frozen, feats, at::Tensor(), anchors, blocks, lo, CheckpointPolicy{0}).loss.backward();
    for (auto& p : w.parameters()) p.mutable_grad() = at::Tensor();
  });

  std::printf("bench flops: %s (%s, %lld layers, hidden %lld), %s, seq %lld, %lld anchors x %lld, drafter %lld "
              "layer(s), %lld threads\n",
              name.c_str(), models::target_arch_name(tc.arch), (long long)tc.num_hidden_layers,
              (long long)tc.hidden_size,
              a.str("target-dtype").c_str(), (long long)S, (long long)N, (long long)dc.block_size,
              (long long)dc.num_hidden_layers, (long long)threads);
  std::printf("GEMM %lld^3: %.4f s = %.1f GFLOP/s (the reference rate)\n", (long long)n, gemm_s, gemm_rate / 1e9);
  std::printf("%-16s %14s %16s %12s %14s %12s\n", "part", "model GFLOP", "predicted s", "measured s", "GFLOP/s",
              "efficiency");
  nlohmann::json out = {{"target", name}, {"max_len", S}, {"num_anchors", N}, {"target_dtype", a.str("target-dtype")},
                        {"threads", threads}, {"gemm_size", n}, {"gemm_flops_per_s", gemm_rate}};
  for (const auto& [part, flops, secs] :
       {std::tuple{"target forward", target_flops, target_s}, std::tuple{"drafter step", drafter_flops, drafter_s}}) {
    const double predicted = flops / gemm_rate;  // at efficiency 1
    std::printf("%-16s %14.3f %16.4f %12.4f %14.1f %12.3f\n", part, flops / 1e9, predicted, secs, flops / secs / 1e9,
                predicted / secs);
    out[part] = {{"flops", flops}, {"predicted_seconds", predicted}, {"measured_seconds", secs},
                 {"efficiency", predicted / secs}};
  }
  if (!a.str("json").empty()) io::write_file_atomically(a.str("json"), out.dump(2) + "\n");
  return 0;
}

}  // namespace dflash::plan
