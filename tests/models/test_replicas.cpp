// What target replicas and pipelines rest on: the device-layout grammar and its errors, replicate() (same bits,
// shared CPU weights), the staged forward run by one thread per stage (same bits as forward()), and the target's
// cost model (parameters against the weights themselves, FLOPs against a hand count, stage memory, the check that
// a replica fits its devices).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <thread>

#include "compute_settings.h"
#include "device_layout.h"
#include "error_of.h"
#include "target_cost.h"
#include "tiny_target.h"

using namespace dflash::models;

TEST(DeviceLayout, ParsesReplicasAndStages) {
  const DeviceLayout one = parse_device_layout("cpu", "--devices");
  EXPECT_EQ(one.num_replicas(), 1);
  EXPECT_EQ(one.num_stages(), 1);
  const DeviceLayout l = parse_device_layout("cpu,cpu;cpu, cpu ;cpu,cpu", "--devices");
  EXPECT_EQ(l.num_replicas(), 3);
  EXPECT_EQ(l.num_stages(), 2);
  EXPECT_TRUE(l.all_cpu());
  EXPECT_EQ(l.str(), "cpu,cpu;cpu,cpu;cpu,cpu");
  EXPECT_EQ(cpu_layout(3).str(), "cpu,cpu,cpu");
}

TEST(DeviceLayout, BadLayoutsNameTheKeyAndTheValue) {
  const std::string key = "train config: 'target_devices'";
  auto err = [&](const std::string& spec) { return error_of([&] { parse_device_layout(spec, key); }); };
  EXPECT_NE(err("cpu,cpu;cpu").find(key + ": every replica needs the same number of pipeline stages; replica 0 has 2, "
                                    "replica 1 has 1 in 'cpu,cpu;cpu'"),
            std::string::npos)
      << err("cpu,cpu;cpu");
  EXPECT_NE(err("cpu;;cpu").find("an empty replica in 'cpu;;cpu'"), std::string::npos) << err("cpu;;cpu");
  EXPECT_NE(err("cpu;").find("an empty replica"), std::string::npos);
  EXPECT_NE(err("cpu,,cpu").find("an empty stage in 'cpu,,cpu'"), std::string::npos);
  EXPECT_NE(err("").find(key + ": needs at least one device"), std::string::npos);
  EXPECT_NE(err("cpu;gpu:1").find(key + ": expected a device like cpu, cuda or cuda:1, got 'gpu:1'"), std::string::npos);
  // Structure is checked before availability, so this machine's GPUs (or none) do not hide the mistake.
  EXPECT_NE(err("cuda:0,cuda:1;cuda:1,cuda:2").find(key + ": cuda:1 is in replica 0 and replica 1 of "
                                                    "'cuda:0,cuda:1;cuda:1,cuda:2'; a CUDA device belongs to one replica"),
            std::string::npos)
      << err("cuda:0,cuda:1;cuda:1,cuda:2");
  EXPECT_NO_THROW(parse_device_layout("cpu;cpu", key));  // a CPU may serve several replicas
  if (!at::hasCUDA())
    EXPECT_NE(err("cuda:0;cuda:1").find("asks for a CUDA device"), std::string::npos) << err("cuda:0;cuda:1");
}

// A CUDA index past the 8-bit index type would wrap onto another device (cuda:256 -> cuda:0) or go negative
// (cuda:999); an empty entry in a device list is a typo, never skipped.
TEST(DeviceLayout, IndicesThatWouldWrapAndEmptyEntriesAreRefused) {
  for (const std::string spec : {"cuda:256", "cuda:999", "cpu;cuda:128"})
    EXPECT_NE(error_of([&] { parse_device_layout_spelling(spec, "--devices"); }).find("a CUDA device index is at most 127"),
              std::string::npos)
        << spec;
  EXPECT_NO_THROW(parse_device_layout_spelling("cuda:127", "--devices"));
  EXPECT_NE(error_of([] { parse_device_layout_spelling("cpu\t", "--devices"); })
                .find("--devices: a control character (byte 9) at position 3 of 'cpu\\x09', in entry 'cpu\\x09'"),
            std::string::npos);
  const std::string key = "train config: 'drafter_devices'";
  for (const std::string list : {"cpu,,cpu", "cpu,"})
    EXPECT_NE(error_of([&] { dflash::ops::parse_devices(list, key); }).find(key + ": an empty entry in '" + list + "'"),
              std::string::npos)
        << list;
  EXPECT_EQ(dflash::ops::parse_devices("cpu,cpu", key).size(), 2u);
}

// dflash doctor reports a missing device itself: the spelling-only parse takes any device, refuses the same mistakes.
TEST(DeviceLayout, SpellingOnlyLeavesAvailabilityToTheCaller) {
  const DeviceLayout l = parse_device_layout_spelling("cuda:7,cuda:8;cpu,cpu", "--devices");
  EXPECT_EQ(l.str(), "cuda:7,cuda:8;cpu,cpu");
  EXPECT_NE(error_of([] { parse_device_layout_spelling("cpu;gpu:1", "--devices"); })
                .find("--devices: expected a device like cpu, cuda or cuda:1, got 'gpu:1'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_device_layout_spelling("cuda:1;cuda:1", "--devices"); })
                .find("cuda:1 is in replica 0 and replica 1"),
            std::string::npos);
}

// A replica gives the same bits as the model it was copied from, and replicas on the CPU share its weights.
TEST(Replicate, SameOutputsSharedCpuWeights) {
  for (const bool hybrid : {false, true}) {
    const TargetConfig c = hybrid ? tiny::tiny_hybrid_config() : tiny::tiny_config("qwen3");
    const auto w = hybrid ? tiny::random_hybrid_weights(c, 3) : tiny::random_weights(c, 3);
    TargetLoadOptions opts;
    opts.stages = split_layers(int(c.num_hidden_layers), {at::kCPU, at::kCPU});
    const TargetModel m = tiny::make_model(c, w, opts);
    const TargetModel r = m.replicate({at::kCPU, at::kCPU});
    EXPECT_TRUE(r.embed_weight().is_same(m.embed_weight()));
    EXPECT_TRUE(r.layer_weights(1).at("mlp.up_proj.weight").is_same(m.layer_weights(1).at("mlp.up_proj.weight")));
    const at::Tensor ids = at::randint(0, c.vocab_size, {2, 11}, at::kLong);
    const auto a = m.forward(ids, nullptr, {0, 2, int(c.num_hidden_layers) - 1}, true, true);
    const auto b = r.forward(ids, nullptr, {0, 2, int(c.num_hidden_layers) - 1}, true, true);
    EXPECT_TRUE(at::equal(a.logits, b.logits));
    for (const auto& [i, h] : a.hidden) EXPECT_TRUE(at::equal(h, b.hidden.at(i))) << i;
    EXPECT_NE(error_of([&] { m.replicate({at::kCPU}); }).find("1 devices for a model of 2 pipeline stages"),
              std::string::npos);
  }
}

// begin_forward + forward_stage, each stage on its own thread (as a pipeline runs them), equal forward() bit for
// bit, with and without a KV cache.
TEST(StagedForward, StagesOnTheirOwnThreadsEqualForward) {
  const TargetConfig c = tiny::tiny_hybrid_config();
  TargetLoadOptions opts;
  opts.stages = split_layers(int(c.num_hidden_layers), {at::kCPU, at::kCPU, at::kCPU});
  const TargetModel m = tiny::make_model(c, tiny::random_hybrid_weights(c, 5), opts);
  const at::Tensor ids = at::randint(0, c.vocab_size, {1, 13}, at::kLong);
  for (const bool cached : {false, true}) {
    KVCache ca = m.make_cache(1, 32), cb = m.make_cache(1, 32);
    const auto ref = m.forward(ids, cached ? &ca : nullptr, {1, 3}, true, true);
    StagedForward f = m.begin_forward(ids, cached ? &cb : nullptr, {1, 3}, true, true);
    for (size_t s = 0; s < m.stages().size(); ++s) std::thread([&] { m.forward_stage(s, f); }).join();
    EXPECT_TRUE(at::equal(ref.logits, f.out.logits));
    EXPECT_TRUE(at::equal(ref.last_hidden, f.out.last_hidden));
    EXPECT_TRUE(at::equal(ref.hidden.at(1), f.out.hidden.at(1)));
    EXPECT_TRUE(at::equal(ref.hidden.at(3), f.out.hidden.at(3)));
    if (cached) EXPECT_EQ(cb.length(), 13);
  }
}

// Parameters: the cost model's count equals the number of values the loader reads (the tiny weights).
TEST(TargetCost, ParamsEqualTheWeights) {
  for (const std::string kind : {"llama", "qwen3", "hybrid"}) {
    const TargetConfig c = kind == "hybrid" ? tiny::tiny_hybrid_config() : tiny::tiny_config(kind);
    const auto w = kind == "hybrid" ? tiny::random_hybrid_weights(c, 1) : tiny::random_weights(c, 1);
    int64_t n = 0;
    for (const auto& [name, t] : w) n += t.numel();
    EXPECT_EQ(target_params(c), n) << kind;
    // One stage holds everything; two stages of a tied model hold the head twice (a copy on the last stage).
    const auto one = target_stage_memory(c, 2, 1, 10, {});
    EXPECT_DOUBLE_EQ(one[0].weights, 2.0 * double(n)) << kind;
    const auto two = target_stage_memory(c, 2, 2, 10, {});
    const double extra = c.tie_word_embeddings ? 2.0 * double(c.vocab_size * c.hidden_size) : 0;
    EXPECT_DOUBLE_EQ(two[0].weights + two[1].weights, 2.0 * double(n) + extra) << kind;
  }
}

// FLOPs of a 10-token forward, counted by hand for the tiny configs.
TEST(TargetCost, FlopsMatchAHandCount) {
  // Llama: H 32, I 48, 4 q heads and 2 KV heads of 8, 3 layers, vocab 97.
  // per layer linear: 2 x 10 x (32 x (32 + 2 x 16) + 32 x 32 + 3 x 32 x 48) = 20 x 7680 = 153600
  // per layer attention: 2 x D 8 x S (S + 1) 110 x Hq 4 = 7040; LM head: 2 x 10 x 97 x 32 = 62080
  const TargetFlops f = target_forward_flops(tiny::tiny_config("llama"), 10, true);
  EXPECT_DOUBLE_EQ(f.linear, 3 * 153600.0);
  EXPECT_DOUBLE_EQ(f.attention, 3 * 7040.0);
  EXPECT_DOUBLE_EQ(f.deltanet, 0.0);
  EXPECT_DOUBLE_EQ(f.lm_head, 62080.0);
  EXPECT_DOUBLE_EQ(target_forward_flops(tiny::tiny_config("llama"), 10, false).lm_head, 0.0);
  // Hybrid: 3 Gated DeltaNet layers (2 q/k heads of 8, 4 v heads of 6: conv_dim 2 x 16 + 24 = 56, value_dim 24)
  // and 2 gated attention layers (q_proj 2 x 4 x 16 = 128 rows, k/v 2 x 16 = 32, o from 64), MLP 3 x 32 x 48.
  // DeltaNet linear: 2 x 10 x (32 x (56 + 24 + 2 x 4) + 24 x 32 + 4608) = 20 x 8192 = 163840
  // attention linear: 2 x 10 x (32 x (128 + 64) + 64 x 32 + 4608) = 20 x 12800 = 256000
  // delta rule (chunk = 10 tokens): 10 x 4 x (10 x (5 x 8 + 3 x 6) + 6 x 8 x 6) + conv 2 x 10 x 56 x 4 = 39200
  // attention: 2 x 16 x 110 x 4 = 14080
  const TargetFlops h = target_forward_flops(tiny::tiny_hybrid_config(), 10, false);
  EXPECT_DOUBLE_EQ(h.linear, 3 * 163840.0 + 2 * 256000.0);
  EXPECT_DOUBLE_EQ(h.deltanet, 3 * 39200.0);
  EXPECT_DOUBLE_EQ(h.attention, 2 * 14080.0);
}

TEST(TargetCost, LayoutMemoryProblemNamesTheReplicaAndStage) {
  const TargetConfig c = tiny::tiny_config("qwen3");
  const auto one = target_stage_memory(c, 4, 1, 64, {1});
  DeviceLayout two_replicas = parse_device_layout("cpu;cpu", "k");
  auto memory = [&](double bytes) { return [bytes](at::Device) { return bytes; }; };
  EXPECT_EQ(layout_memory_problem(c, 4, two_replicas, 64, {1}, memory(one[0].total()), "k"), "");
  const std::string p = layout_memory_problem(c, 4, two_replicas, 64, {1}, memory(one[0].total() - 1), "k 'cpu;cpu'");
  EXPECT_NE(p.find("k 'cpu;cpu': replica 0 cannot hold the target: its stage 0 on cpu needs at least"), std::string::npos)
      << p;
  EXPECT_NE(p.find("more pipeline stages"), std::string::npos) << p;
  // Two stages per replica halve the layers each device holds: now it fits.
  const DeviceLayout staged = parse_device_layout("cpu,cpu;cpu,cpu", "k");
  EXPECT_EQ(layout_memory_problem(c, 4, staged, 64, {1}, memory(one[0].total() - 1), "k"), "");
  EXPECT_EQ(layout_memory_problem(c, 4, two_replicas, 64, {1}, memory(-1), "k"), "");  // < 0: not checked
}
