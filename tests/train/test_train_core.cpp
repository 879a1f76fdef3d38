// Training internals: AdamW against LibTorch's torch::optim::AdamW, the learning-rate schedule, gradient
// clipping, the bounded queue (error propagation, close), config parsing; and a 2-worker mini training in
// one process (also the ThreadSanitizer target, ctest label `tsan`).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include "block_batch.h"
#include "chunked_lm_loss_op.h"
#include "compute_settings.h"
#include "bounded_queue.h"
#include "checkpoint.h"
#include "distributed.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "drafter_weights.h"
#include "hidden_shards.h"
#include "offline_dataset.h"
#include "optimizer.h"
#include "safetensors.h"
#include "step_producer.h"
#include "tiny_drafter_config.h"
#include "tiny_run_files.h"
#include "train_config.h"
#include "master_state.h"
#include "run_context.h"
#include "step_runner.h"
#include "target_setup.h"
#include "trainer.h"

namespace fs = std::filesystem;
using namespace dflash::train;
using dflash::util::BoundedQueue;
using dflash::train::test::write_dflash_shard;
using dflash::train::test::write_tiny_target;

TEST(AdamW, MatchesLibTorch) {
  at::manual_seed(0);
  std::vector<at::Tensor> ours{at::randn({7, 5}, at::kDouble), at::randn({3}, at::kDouble)};
  std::vector<torch::Tensor> ref;
  for (auto& p : ours) ref.push_back(p.clone().set_requires_grad(true));
  torch::optim::AdamW opt(ref, torch::optim::AdamWOptions(1e-2).betas({0.8, 0.95}).eps(1e-7).weight_decay(0.1));
  AdamW mine(ours, AdamWSettings{0.8, 0.95, 1e-7, 0.1});
  for (int step = 0; step < 5; ++step) {
    std::vector<at::Tensor> g;
    for (auto& p : ours) g.push_back(at::randn_like(p));
    for (size_t i = 0; i < ref.size(); ++i) ref[i].mutable_grad() = g[i].clone();
    const double lr = 1e-2 * (step + 1);
    for (auto& group : opt.param_groups()) group.options().set_lr(lr);
    opt.step();
    mine.step(g, lr);
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(at::allclose(ours[i], ref[i].detach(), 1e-12, 1e-14)) << "step " << step << " param " << i;
  }
  EXPECT_EQ(mine.steps(), 5);
}

TEST(Schedule, WarmupThenCosine) {
  const int64_t total = 100;  // warmup ceil(0.04 * 100) = 4 steps
  EXPECT_DOUBLE_EQ(cosine_lr(0, total, 1.0, 0.04, 0.0), 0.25);
  EXPECT_DOUBLE_EQ(cosine_lr(3, total, 1.0, 0.04, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(cosine_lr(4, total, 1.0, 0.04, 0.0), 1.0);
  EXPECT_NEAR(cosine_lr(99, total, 1.0, 0.04, 0.1), 0.1, 1e-12);
  const double mid = cosine_lr(4 + 95 / 2, total, 1.0, 0.04, 0.0);
  EXPECT_NEAR(mid, 0.5 * (1 + std::cos(M_PI * double(95 / 2) / 95.0)), 1e-12);
  for (int64_t s = 4; s < 99; ++s) EXPECT_GE(cosine_lr(s, total, 1.0, 0.04, 0.0), cosine_lr(s + 1, total, 1.0, 0.04, 0.0));
}

TEST(Clip, GlobalNorm) {
  std::vector<at::Tensor> g{at::full({4}, 3.0, at::kDouble), at::full({1}, 4.0, at::kDouble)};  // norm sqrt(36+16)
  const double n = clip_grad_norm(g, 1.0);
  EXPECT_NEAR(n, std::sqrt(52.0), 1e-12);
  double sq = 0;
  for (auto& t : g) sq += t.pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(sq), 1.0, 1e-5);
  std::vector<at::Tensor> small{at::full({2}, 0.1, at::kDouble)};
  clip_grad_norm(small, 1.0);
  EXPECT_DOUBLE_EQ(small[0][0].item<double>(), 0.1);
}

TEST(BoundedQueue, ErrorReachesConsumerAndCloseUnblocks) {
  BoundedQueue<int> q(1);
  std::thread producer([&] {
    q.push(1);
    try {
      throw std::runtime_error("producer broke");
    } catch (...) {
      q.fail(std::current_exception());
    }
  });
  EXPECT_EQ(q.pop().value(), 1);
  EXPECT_THROW(
      {
        try {
          q.pop();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "producer broke");
          throw;
        }
      },
      std::runtime_error);
  producer.join();
  BoundedQueue<int> q2(1);
  q2.push(1);
  std::thread blocked([&] { EXPECT_FALSE(q2.push(2)); });  // full: blocks until close
  while (q2.pushers() == 0) std::this_thread::yield();     // close only once the push is waiting
  q2.close();
  blocked.join();
}

TEST(TrainConfig, UnknownKeysAndTypes) {
  TrainConfig c;
  EXPECT_THROW(apply_json(c, nlohmann::json{{"lrr", 1}}, "f.json"), std::invalid_argument);
  EXPECT_THROW(apply_json(c, nlohmann::json{{"steps", 1.5}}, "f.json"), std::invalid_argument);
  apply_json(c, nlohmann::json{{"drafter_devices", {"cpu", "cpu"}}, {"target_layer_ids", {1, 9}}}, "f.json");
  EXPECT_EQ(c.drafter_devices.devices.size(), 2u);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 9}));
  TrainConfig d;
  ASSERT_TRUE(parse_train_args({"--lr", "1e-3", "--num-anchors", "64", "--resume"}, d));
  EXPECT_DOUBLE_EQ(d.lr, 1e-3);
  EXPECT_EQ(d.num_anchors, 64);
  EXPECT_TRUE(d.resume);
  EXPECT_DOUBLE_EQ(TrainConfig{}.lr, 6e-4);
  EXPECT_DOUBLE_EQ(TrainConfig{}.warmup_ratio, 0.04);
  EXPECT_EQ(TrainConfig{}.num_anchors, 512);
}

namespace {

// Not fs::remove_all: the wheel's libtorch.so exports its own std::filesystem::remove_all, which the dynamic
// linker may bind to and which crashes (null call) here.
void remove_tree(const fs::path& p) { (void)std::system(("rm -rf '" + p.string() + "'").c_str()); }

// The mini runs' settings: the tiny target, `count` random offline samples of 12, 13, ... tokens (prompt: the
// first 3) with target layer 0's features (H = 16; the last layer, 1, is refused) in one dflash shard, block 4,
// 3 steps x 4 anchors, fp32, one thread, a metrics line per step; the run folder is root / run.
TrainConfig mini_config(const fs::path& root, const std::string& run, int count, uint64_t seed) {
  std::vector<Sample> samples;
  at::manual_seed(seed);
  for (int i = 0; i < count; ++i) {
    const int64_t S = 12 + i;
    Sample s;
    s.input_ids = at::randint(3, 60, {S}, at::kLong);
    s.loss_mask = at::arange(S) >= 3;
    s.features = at::randn({S, 16});
    samples.push_back(s);
  }
  TrainConfig c;
  c.target = write_tiny_target(root / "target");
  c.data = (root / "data.safetensors").string();
  write_dflash_shard(c.data, samples, {0}, 16);
  c.out = (root / run).string();
  c.mask_token_id = 63;
  c.block_size = 4;
  c.num_anchors = 4;
  c.target_layer_ids = {0};  // the default for a 2-layer target is its last layer, which train refuses
  c.steps = 3;
  c.dtype = dflash::util::Dtype::F32;
  c.threads = 1;
  c.log_every = 1;
  return c;
}

}  // namespace

// collate pads each micro-batch to a multiple of pad_multiple (bounded by max_len) so bf16 CPU training
// sees a few shapes; the padding must change nothing: same anchors, same loss, same gradients (fp64, a
// sliding-window layer of window 8 included, soft labels on).
TEST(Collate, PaddingToAMultipleLeavesLossAndGradientsUnchanged) {
  using namespace dflash::drafter;
  const DrafterConfig c = parse_drafter_config(tiny_drafter_config_json(), "cfg.json");
  at::manual_seed(3);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  Sample smp;
  const int64_t S = 13;
  smp.input_ids = at::randint(0, 31, {S}, at::kLong);
  smp.loss_mask = at::arange(S) >= 4;
  smp.features = at::randn({S, 32}, f64);
  smp.last_hidden = at::randn({S, 16}, f64);
  FrozenTarget t{at::randn({32, 16}, f64), at::Tensor()};
  t.lm_head = t.embed;
  DrafterLossOptions opt;
  opt.chunk.kl_weight = 0.15;

  struct Out {
    int64_t len;
    at::Tensor anchors, loss;
    std::vector<at::Tensor> grads;
  };
  auto run = [&](int64_t max_len, int64_t pad_multiple) {
    const MicroBatch mb = collate({smp}, max_len, pad_multiple);
    DrafterWeights w = init_drafter_weights(c, at::kDouble, 7, 0.1, 0.1);
    w.set_requires_grad(true);
    std::mt19937_64 rng(11);
    const AnchorSample a = sample_anchors(mb.loss_mask, 5, rng);
    const BlockBatch bb = build_block_batch(mb.input_ids, mb.loss_mask, a, c.block_size, c.mask_token_id, 4.0);
    const auto r = drafter_loss(c, w, t, mb.features, mb.last_hidden, a, bb, opt);
    r.loss.backward();
    Out o{mb.input_ids.size(1), a.anchors, r.loss.detach(), {}};
    for (auto& [n, p] : w.named()) o.grads.push_back(p.grad());
    return o;
  };
  const Out plain = run(64, 1), padded = run(64, 8), capped = run(14, 8);
  EXPECT_EQ(plain.len, 13);
  EXPECT_EQ(padded.len, 16);
  EXPECT_EQ(capped.len, 14);  // never past max_len
  EXPECT_GT(plain.loss.item<double>(), 0.0);
  for (const Out* o : {&padded, &capped}) {
    EXPECT_TRUE(at::equal(o->anchors, plain.anchors));
    EXPECT_NEAR(o->loss.item<double>(), plain.loss.item<double>(), 1e-12);
    ASSERT_EQ(o->grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_TRUE(plain.grads[i].defined());
      EXPECT_LT((o->grads[i] - plain.grads[i]).abs().max().item<double>(), 1e-12) << i;
      EXPECT_GT(plain.grads[i].abs().max().item<double>(), 0.0) << i;
    }
  }
}

// Two worker threads, offline features, a few steps with a checkpoint each step; under TSan this is the
// race check of the producer / worker / main-thread hand-offs.
TEST(MiniTraining, TwoWorkerThreads) {
  const fs::path root = fs::temp_directory_path() / ("dflash_train_mini_" + std::to_string(::getpid()));
  remove_tree(root);
  TrainConfig c = mini_config(root, "run", 6, 2);
  c.drafter_devices = dflash::util::read_device_list_setting("cpu,cpu", "test");
  c.checkpoint_every = 1;
  ASSERT_EQ(run_training(c), 0);
  std::string path;
  const TrainState st = load_latest_checkpoint(c.out, &path);
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(st.data_pos, 3 * 2);
  remove_tree(root);
}

namespace {

// The mini run of TwoWorkerThreads on `devices`, in a fresh run folder; returns the final master weights.
NamedTensors mini_run(const fs::path& root, const std::string& name, const std::string& devices,
                      const std::string& backend) {
  TrainConfig c = mini_config(root, name, 6, 2);
  c.drafter_devices = dflash::util::read_device_list_setting(devices, "test");
  c.dist_backend = backend;
  c.checkpoint_every = 3;
  EXPECT_EQ(run_training(c), 0);
  return load_latest_checkpoint(c.out).master;
}

// torchrun's variables for a group of one on a free loopback port; unset again at scope exit.
struct GroupOfOne {
  GroupOfOne() {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(29500 + ::getpid() % 20000).c_str(), 1);
  }
  ~GroupOfOne() {
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
  }
};

}  // namespace

// `--dist-backend gloo` with WORLD_SIZE=1 joins a real c10d group of one; the all-reduce must then change
// nothing: the weights equal the single-process run's bit for bit.
TEST(MiniTraining, GlooGroupOfOneEqualsSingleProcess) {
  if (!have_gloo()) GTEST_SKIP() << "built without gloo headers";
  const fs::path root = fs::temp_directory_path() / ("dflash_train_gloo1_" + std::to_string(::getpid()));
  remove_tree(root);
  const NamedTensors single = mini_run(root, "single", "cpu,cpu", "auto");
  NamedTensors group;
  {
    GroupOfOne env;
    group = mini_run(root, "group", "cpu,cpu", "gloo");
  }
  ASSERT_EQ(single.size(), group.size());
  for (size_t i = 0; i < single.size(); ++i) EXPECT_TRUE(at::equal(single[i].second, group[i].second)) << single[i].first;
  remove_tree(root);
}

// GPU only (skipped here): two CUDA workers on one GPU in one process, gradients summed on the device and
// all-reduced by ProcessGroupNCCL in a group of one; the weights match the CPU run to fp32 rounding.
TEST(MiniTraining, NcclTwoCudaWorkersMatchCpu) {
  // scripts/gpu_check.sh sets DFLASH_REQUIRE_CUDA: there a skip would hide a broken build or device.
  const bool required = std::getenv("DFLASH_REQUIRE_CUDA") != nullptr;
  if (!have_nccl() || at::getNumGPUs() < 1) {
    const std::string why = !have_nccl() ? "built without c10d NCCL" : "no CUDA device";
    if (required) FAIL() << why << " (DFLASH_REQUIRE_CUDA is set)";
    GTEST_SKIP() << why;
  }
  const fs::path root = fs::temp_directory_path() / ("dflash_train_nccl_" + std::to_string(::getpid()));
  remove_tree(root);
  const NamedTensors cpu = mini_run(root, "cpu", "cpu,cpu", "auto");
  NamedTensors gpu;
  {
    GroupOfOne env;
    gpu = mini_run(root, "gpu", "cuda:0,cuda:0", "nccl");
  }
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(gpu[i].second.device().is_cpu());
    EXPECT_TRUE(at::allclose(cpu[i].second, gpu[i].second, 1e-4, 1e-5))
        << cpu[i].first << " max diff " << (cpu[i].second - gpu[i].second).abs().max().item<double>();
  }
  remove_tree(root);
}

// GPU only (skipped here): `deterministic` makes a CUDA run repeatable bit for bit (the attention's dQ without
// atomics, every other op's deterministic implementation; one that has none would stop the run).
TEST(MiniTraining, DeterministicCudaRunsAreBitwiseEqual) {
  const bool required = std::getenv("DFLASH_REQUIRE_CUDA") != nullptr;
  if (at::getNumGPUs() < 1) {
    if (required) FAIL() << "no CUDA device (DFLASH_REQUIRE_CUDA is set)";
    GTEST_SKIP() << "no CUDA device";
  }
  const fs::path root = fs::temp_directory_path() / ("dflash_train_det_" + std::to_string(::getpid()));
  remove_tree(root);
  NamedTensors runs[2];
  for (int i = 0; i < 2; ++i) {
    TrainConfig c = mini_config(root, "run" + std::to_string(i), 6, 2);
    c.drafter_devices = dflash::util::read_device_list_setting("cuda:0", "test");
    c.dtype = dflash::util::Dtype::BF16;  // the CUDA attention's dtype
    c.deterministic = true;
    c.checkpoint_every = 3;
    ASSERT_EQ(run_training(c), 0);
    runs[i] = load_latest_checkpoint(c.out).master;
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_TRUE(at::equal(runs[0][i].second, runs[1][i].second)) << runs[0][i].first;
  remove_tree(root);
}

// init_from_target_layer: the drafter's layer starts as the target's layer 1, tensor for tensor (q/k norms,
// which this Llama lacks, stay at 1); with a vanishing lr the first checkpoint still holds those weights.
// Asking for a layer past the target's last is a clear error.
TEST(MiniTraining, InitFromTargetLayer) {
  const fs::path root = fs::temp_directory_path() / ("dflash_train_init_" + std::to_string(::getpid()));
  remove_tree(root);
  TrainConfig c = mini_config(root, "run", 2, 3);
  c.num_anchors = 2;
  c.steps = 1;
  c.lr = 1e-12;
  c.checkpoint_every = 1;
  c.init_from_target_layer = 1;
  ASSERT_EQ(run_training(c), 0);
  const NamedTensors master = load_latest_checkpoint(c.out).master;
  const auto target = dflash::io::SafetensorsFile::open((root / "target" / "model.safetensors").string());
  int copied = 0;
  for (const auto& [name, t] : master) {
    if (name.rfind("layers.0.", 0) != 0) continue;
    const std::string suffix = name.substr(9);
    const std::string twin = "model.layers.1." + suffix;
    if (!target.contains(twin)) {
      EXPECT_TRUE(at::allclose(t, at::ones_like(t))) << name << " has no target counterpart and must stay 1";
      continue;
    }
    EXPECT_TRUE(at::allclose(t, target.load(twin, at::kFloat), 0, 1e-6)) << name << " differs from target layer 1";
    ++copied;
  }
  EXPECT_EQ(copied, 9);  // 2 norms, q, k, v, o, gate, up, down

  c.out = (root / "run_bad").string();
  c.init_from_target_layer = 2;  // the tiny target has layers 0 and 1 only
  try {
    run_training(c);
    ADD_FAILURE() << "init_from_target_layer past the target's layers was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("init_from_target_layer' must be <= 1"), std::string::npos) << e.what();
  }
  remove_tree(root);
}

// The phases of run_training one by one (trainer.h): a good step, then a step whose loss is NaN (its features
// poisoned) stops with DivergedError before AdamW touches the master weights or the replicas.
TEST(MiniTraining, NonFiniteStepStopsBeforeTheUpdate) {
  const fs::path root = fs::temp_directory_path() / ("dflash_train_nan_" + std::to_string(::getpid()));
  remove_tree(root);
  TrainConfig c = mini_config(root, "run", 4, 5);
  c.validate();
  const RunContext run = open_run(c);
  const TargetSide side = load_target_side(c, run);
  MasterState master = build_master_state(c, run, side);
  StepRunner runner(c, run, side, master, {});
  StepProducer producer(producer_settings(c, side.dcfg, 1, 0, 1), *side.samples, {}, 0, 3, 0);
  auto first = producer.next();
  ASSERT_TRUE(first);
  const StepOutcome good = runner.step(*first, 0, 3, false);
  EXPECT_EQ(good.metrics.step, 1);
  EXPECT_TRUE(std::isfinite(good.metrics.loss) && good.metrics.loss > 0);
  EXPECT_TRUE(master.finite());

  auto second = producer.next();
  ASSERT_TRUE(second);
  for (auto& mb : second->micro) mb.features.fill_(std::nan(""));
  std::vector<at::Tensor> before;
  for (const auto& p : master.params) before.push_back(p.clone());
  try {
    runner.step(*second, 1, 3, false);
    ADD_FAILURE() << "a NaN loss was accepted";
  } catch (const DivergedError& e) {
    EXPECT_EQ(e.step, 2);
    EXPECT_NE(std::string(e.what()).find("diverged at step 2: loss nan"), std::string::npos) << e.what();
  }
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(before[i], master.params[i])) << i;
  EXPECT_EQ(master.adam->steps(), 1);
  producer.stop();
  remove_tree(root);
}

// torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE: each process on a node takes its share of the node's device list.
TEST(LocalDevices, EachProcessTakesItsShare) {
  const std::vector<at::Device> four{at::Device("cpu"), at::Device("cpu"), at::Device("cuda:0"), at::Device("cuda:1")};
  EXPECT_EQ(local_devices(four, 0, 1, "d", false), four);
  EXPECT_EQ(local_devices(four, 1, 2, "d", false), (std::vector<at::Device>{at::Device("cuda:0"), at::Device("cuda:1")}));
  EXPECT_EQ(local_devices(four, 3, 4, "d", false), (std::vector<at::Device>{at::Device("cuda:1")}));
  const std::vector<at::Device> cpu{at::Device("cpu")};
  EXPECT_EQ(local_devices(cpu, 1, 2, "t", true), cpu);  // a CPU target is shared
  try {
    local_devices(cpu, 1, 2, "train config: 'drafter_devices'", false);
    ADD_FAILURE() << "one drafter device for two processes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'drafter_devices' lists 1 devices for LOCAL_WORLD_SIZE=2"), std::string::npos);
  }
  EXPECT_THROW(local_devices(four, 2, 2, "d", false), std::invalid_argument);
}

// The same rule on a target layout: replicas are divided among the processes; one replica slices as a flat list.
TEST(LocalDevices, TargetReplicasAreDividedAmongProcesses) {
  using dflash::models::DeviceLayout;
  auto cuda = [](int i) { return at::Device(at::kCUDA, c10::DeviceIndex(i)); };
  DeviceLayout four;  // cuda:0,cuda:1;cuda:2,cuda:3;cuda:4,cuda:5;cuda:6,cuda:7 (built by hand: no GPU needed)
  for (int r = 0; r < 4; ++r) four.replicas.push_back({cuda(2 * r), cuda(2 * r + 1)});
  EXPECT_EQ(local_target_layout(four, 0, 1, "t").str(), four.str());
  EXPECT_EQ(local_target_layout(four, 1, 2, "t").str(), "cuda:4,cuda:5;cuda:6,cuda:7");
  EXPECT_EQ(local_target_layout(four, 3, 4, "t").str(), "cuda:6,cuda:7");
  DeviceLayout one;
  one.replicas.push_back({cuda(0), cuda(1), cuda(2), cuda(3)});
  EXPECT_EQ(local_target_layout(one, 1, 2, "t").str(), "cuda:2,cuda:3");  // as before: the stages are divided
  EXPECT_EQ(local_target_layout(dflash::models::cpu_layout(1), 1, 2, "t").str(), "cpu");  // a CPU target is shared
  try {
    local_target_layout(four, 0, 3, "train config: 'target_devices'");
    ADD_FAILURE() << "4 replicas for 3 processes were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train config: 'target_devices' '" + four.str() +
                                         "' lists 4 replicas for LOCAL_WORLD_SIZE=3"),
              std::string::npos)
        << e.what();
  }
  // A GPU runs the target or drafter workers, not both.
  try {
    check_target_and_drafter_apart(four, {cuda(8), cuda(5)}, "T", "D");
    ADD_FAILURE() << "cuda:5 in both lists was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:5 is in 'target_devices' ('T') and in 'drafter_devices' ('D')"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_target_and_drafter_apart(dflash::models::cpu_layout(2), {at::kCPU, at::kCPU}, "T", "D"));
}

namespace {

// Every micro-batch of a 3-step online run (2 workers, grad_accum 2) made with target_devices `layout`
// (`pipeline`: a thread per stage), plus the producer's busy seconds.
std::vector<MicroBatch> online_micro_batches(const fs::path& root, const std::string& layout, bool pipeline,
                                             double* busy = nullptr) {
  TrainConfig c = mini_config(root, "run_" + std::to_string(std::hash<std::string>{}(layout + (pipeline ? "p" : "s"))),
                              6, 3);
  c.data = (root / "tokens.jsonl").string();
  if (!fs::exists(c.data)) {
    std::ofstream f(c.data);
    at::manual_seed(4);
    for (int i = 0; i < 9; ++i) {
      const at::Tensor ids = at::randint(3, 60, {14 + 3 * i}, at::kLong);
      f << "{\"input_ids\": [";
      for (int64_t j = 0; j < ids.numel(); ++j) f << (j ? "," : "") << ids[j].item<int64_t>();
      f << "], \"loss_mask\": [";
      for (int64_t j = 0; j < ids.numel(); ++j) f << (j ? "," : "") << (j >= 4 ? 1 : 0);
      f << "]}\n";
    }
  }
  c.target_devices = dflash::util::read_device_grid_setting(layout, "test");
  c.kl_weight = 0.15;  // the last hidden state travels through the stages too
  c.grad_accum = 2;
  c.queue_depth = 1;
  const RunContext run = open_run(c);
  const TargetSide side = load_target_side(c, run);
  const auto targets = target_replicas(side);
  ProducerSettings ps = producer_settings(c, side.dcfg, 2, 0, 1, int64_t(targets.size()), run.target_layout.num_stages());
  ps.pipeline = pipeline;
  StepProducer producer(ps, *side.samples, targets, 0, 3, 0);
  std::vector<MicroBatch> out;
  while (auto item = producer.next())
    for (auto& mb : item->micro) out.push_back(std::move(mb));
  if (busy) *busy = producer.busy_seconds();
  return out;
}

}  // namespace

// Micro-batch k from replica k % R, through a pipeline of a thread per stage or the stages in turn: the same bits.
TEST(MiniTraining, ReplicasAndPipelinedStagesMakeTheSameMicroBatches) {
  const fs::path root = fs::temp_directory_path() / ("dflash_train_replicas_" + std::to_string(::getpid()));
  remove_tree(root);
  double busy = 0;
  const std::vector<MicroBatch> ref = online_micro_batches(root, "cpu", false, &busy);
  ASSERT_EQ(ref.size(), 3u * 2 * 2);
  EXPECT_GT(busy, 0.0);
  for (const auto& [layout, pipeline] : std::vector<std::pair<std::string, bool>>{
           {"cpu,cpu", true}, {"cpu,cpu", false}, {"cpu;cpu", true}, {"cpu;cpu;cpu", true}, {"cpu,cpu;cpu,cpu", true}}) {
    const std::vector<MicroBatch> got = online_micro_batches(root, layout, pipeline);
    ASSERT_EQ(got.size(), ref.size()) << layout;
    for (size_t i = 0; i < ref.size(); ++i) {
      const std::string at = layout + (pipeline ? " pipelined" : " in turn") + ", micro-batch " + std::to_string(i);
      EXPECT_EQ(got[i].index, ref[i].index) << at;
      EXPECT_EQ(got[i].worker, ref[i].worker) << at;
      EXPECT_TRUE(at::equal(got[i].input_ids, ref[i].input_ids)) << at;
      EXPECT_TRUE(at::equal(got[i].features, ref[i].features)) << at;
      EXPECT_TRUE(at::equal(got[i].last_hidden, ref[i].last_hidden)) << at;
      EXPECT_TRUE(at::equal(got[i].anchors.anchors, ref[i].anchors.anchors)) << at;
      EXPECT_TRUE(at::equal(got[i].blocks.labels, ref[i].blocks.labels)) << at;
    }
  }
  remove_tree(root);
}

// Each compute thread keeps its own intra-op thread count (target replicas and stages, drafter workers), even
// when another thread sets a different one before this thread's first parallel op (LibTorch would otherwise take
// the process-wide value last set by anyone on that first op).
TEST(Threads, EachThreadKeepsItsOwnIntraOpCount) {
  std::atomic<int> ready{0};
  int seen[2] = {0, 0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i)
    ts.emplace_back([&, i] {
      dflash::ops::set_thread_local_threads(i + 1);
      ++ready;
      while (ready < 2) std::this_thread::yield();  // both have set theirs before either runs an op
      (void)at::randn({256, 256}).sum();           // libtorch's first parallel op on this thread
      // ... and libdflash_ops's (its own lazy initialisation: the fused CPU cross-entropy runs parallel_for)
      const at::Tensor h = at::randn({64, 16}), head = at::randn({32, 16});
      (void)dflash::ops::chunked_lm_loss(h, head, at::randint(0, 32, {64}, at::kLong), at::ones({64}), {}, {}, {});
      seen[i] = at::get_num_threads();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(seen[0], 1);
  EXPECT_EQ(seen[1], 2);
}
