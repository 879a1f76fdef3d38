// What `dflash data regenerate` writes, without the command: the prompt queue (resume, held-out texts), the
// reorder buffer (replies finishing out of order are written in prompt order, with their features), and the
// repair of features a crash lost (recomputed by a forward equal to the features kept during generation).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hidden_features.h"
#include "hidden_shard_writer.h"
#include "regenerate_output.h"
#include "sample_store.h"
#include "tiny_target.h"

namespace fs = std::filesystem;
using namespace dflash;
using namespace dflash::data;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  (void)std::system(("rm -rf '" + d.string() + "'").c_str());
  fs::create_directories(d);
  return d;
}

std::vector<nlohmann::json> lines(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

Prompt prompt(int64_t index, const std::string& user) {
  Prompt p;
  p.index = index;
  p.messages = {{"user", user}};
  return p;
}

GenerationResult reply(std::vector<int64_t> tokens, bool eos) {
  GenerationResult r;
  r.tokens = std::move(tokens);
  r.hit_eos = eos;
  return r;
}

HiddenMeta meta_for(const models::TargetConfig& c, const std::vector<int64_t>& layers) {
  HiddenMeta m;
  m.target_layer_ids = layers;
  m.hidden_size = c.hidden_size;
  return m;
}

}  // namespace

TEST(PromptQueue, SkipsWrittenAndHeldOutPrompts) {
  const fs::path d = fresh_dir("dflash_queue");
  SampleStore store((d / "out.jsonl").string());
  store.append({{"index", 1}, {"input_ids", {1, 2}}, {"loss_mask", {0, 1}}});
  PromptQueue q({prompt(0, "a"), prompt(1, "b"), prompt(2, "an eval question"), prompt(3, "c")}, store,
                {"an eval question"});
  EXPECT_EQ(q.size(), 4);
  EXPECT_EQ(q.already_done(), 1);
  std::vector<int64_t> got;
  while (const Prompt* p = q.next()) got.push_back(p->index);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(q.dropped(), 1);
}

// Replies finish in the order 2, 0, 3, 1; lines appear as soon as every earlier prompt is written.
TEST(OrderedSampleWriter, WritesInPromptOrderWithLossMaskOnTheReply) {
  const fs::path d = fresh_dir("dflash_ordered");
  const fs::path out = d / "samples.jsonl";
  SampleStore store(out.string());
  OrderedSampleWriter w(store, nullptr, "prompts.jsonl", "train");
  for (int64_t i = 0; i < 4; ++i) w.started(i, {10 + i, 20 + i});
  w.finished(2, reply({7}, true));
  EXPECT_EQ(lines(out).size(), 0u);
  w.finished(0, reply({5, 6}, false));
  EXPECT_EQ(lines(out).size(), 1u);  // 0 written; 1 still running blocks 2
  w.finished(3, reply({8, 9, 2}, true));
  EXPECT_EQ(w.unwritten(), 3u);
  w.finished(1, reply({}, false));
  EXPECT_EQ(w.unwritten(), 0u);
  const auto l = lines(out);
  ASSERT_EQ(l.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(l[size_t(i)]["index"], i);
  EXPECT_EQ(l[0]["input_ids"], (std::vector<int64_t>{10, 20, 5, 6}));
  EXPECT_EQ(l[0]["loss_mask"], (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l[0]["finish"], "length");
  EXPECT_EQ(l[2]["finish"], "eos");
  EXPECT_EQ(l[3]["response_tokens"], 3);
  EXPECT_EQ(l[1]["prompt_tokens"], 2);
  EXPECT_EQ(l[1]["source"], "prompts.jsonl");
  EXPECT_THROW(w.finished(9, reply({1}, true)), std::logic_error);  // never started
}

// Features travel with their reply into the shard writer; a crash that loses the buffered ones is repaired
// by one forward per sample, equal to what generation kept.
TEST(OrderedSampleWriter, FeaturesAndTheirRepair) {
  const auto cfg = models::tiny::tiny_config("qwen3");
  const auto model = models::tiny::make_model(cfg, models::tiny::random_weights(cfg, 3));
  const std::vector<int> layers{2, 0};
  const fs::path d = fresh_dir("dflash_ordered_features");
  const fs::path out = d / "samples.jsonl", feats = d / "features";
  const nlohmann::json settings = {{"case", "test"}};
  std::vector<std::vector<int64_t>> samples = {{3, 4, 5, 6}, {7, 8, 9}, {1, 2, 3, 4, 5}};
  {
    SampleStore store(out.string());
    HiddenShardWriter shards(feats, "part0of1", meta_for(cfg, {2, 0}), settings, 2, "hint");
    OrderedSampleWriter w(store, &shards, "p.jsonl", "train");
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<int64_t> prompt(samples[size_t(i)].begin(), samples[size_t(i)].begin() + 2);
      w.started(i, prompt);
    }
    for (int64_t i : {1, 0, 2}) {
      GenerationResult r = reply(std::vector<int64_t>(samples[size_t(i)].begin() + 2, samples[size_t(i)].end()), true);
      r.features = sample_features(model, samples[size_t(i)], layers);
      w.finished(i, std::move(r));
    }
    EXPECT_EQ(shards.samples(), 2);  // one full shard of 2; sample 2 still buffered when the "crash" comes
  }
  HiddenShardWriter shards(feats, "part0of1", meta_for(cfg, {2, 0}), settings, 2, "hint");
  EXPECT_EQ(shards.covered(), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(repair_missing_features(model, out.string(), layers, shards), 1);
  EXPECT_EQ(shards.covered(), (std::set<int64_t>{0, 1, 2}));
  EXPECT_EQ(repair_missing_features(model, out.string(), layers, shards), 0);
  HiddenShards read(feats.string());
  ASSERT_EQ(read.size(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    const auto s = read.get(i);
    ASSERT_TRUE(s);
    const auto& want = samples[size_t(i)];  // shard order: 0, 1 (the first shard), then 2 (the repair)
    EXPECT_EQ(s->input_ids.size(0), int64_t(want.size()));
    const at::Tensor ref = sample_features(model, want, layers).to(at::kBFloat16).to(at::kFloat);
    EXPECT_TRUE(at::equal(s->hidden_states.to(at::kFloat), ref)) << i;
  }
  // Other settings on resume are refused with the hint.
  try {
    HiddenShardWriter other(feats, "part0of1", meta_for(cfg, {2, 0}), {{"case", "other"}}, 2, "use the same settings");
    ADD_FAILURE() << "other settings were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("written with case = \"test\", this run has \"other\"; use the same settings"),
              std::string::npos) << e.what();
  }
}
