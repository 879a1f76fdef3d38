// Prompt formats of ../shared/data and the generic chat format; the held-out policy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "held_out.h"
#include "prompt_sources.h"
#include "shard_index.h"
#include "token_records.h"

namespace {

std::string dir() {
  auto d = std::filesystem::temp_directory_path() / ("dflash_test_prompts_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string write(const std::string& name, const std::string& text) {
  const std::string p = dir() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

const std::string kShared = DFLASH_SHARED_DATA;

}  // namespace

TEST(PromptSources, ReadsEveryFormat) {
  const auto p = write("mixed.jsonl",
                       "{\"question\":\"q1\",\"answer\":\"a\"}\n\n"
                       "{\"prompt\":\"def f():\"}\n"
                       "{\"turns\":[\"t1\",\"t2\"]}\n"
                       "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"},"
                       "{\"role\":\"assistant\",\"content\":\"old\"}]}\n"
                       "{\"prompt_ids\":[1,2,3]}\n");
  const auto ps = dflash::data::read_prompts(p);
  ASSERT_EQ(ps.size(), 5u);
  EXPECT_EQ(ps[0].messages.at(0).content, "q1");
  EXPECT_EQ(ps[1].messages.at(0).content, "def f():");
  EXPECT_EQ(ps[2].messages.at(0).content, "t1");
  ASSERT_EQ(ps[3].messages.size(), 2u);  // the recorded assistant reply is dropped
  EXPECT_EQ(ps[3].messages[0].role, "system");
  EXPECT_EQ(ps[4].prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].index, static_cast<int64_t>(i));
  EXPECT_EQ(dflash::data::read_prompts(p, 2).size(), 2u);
}

TEST(PromptSources, ErrorsNameFileLineAndField) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    const auto p = write("bad.jsonl", text);
    try {
      dflash::data::read_prompts(p);
      FAIL() << "expected an error for " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.jsonl"), std::string::npos) << e.what();
    }
  };
  expect_error("{\"question\":\"a\"}\n{\"x\":1}\n", ":2: no prompt field");
  expect_error("{\"question\":5}\n", "'question' must be a string");
  expect_error("[1,2]\n", "expected a JSON object");
  expect_error("{\"question\":\n", "invalid JSON");
  expect_error("{\"messages\":[{\"role\":\"user\"}]}\n", "messages[0]");
  EXPECT_THROW(dflash::data::read_prompts(dir() + "/missing.jsonl"), std::runtime_error);
}

TEST(PromptSources, ReadsSharedDataIncludingGzip) {
  if (!std::filesystem::exists(kShared + "/gsm8k_train.jsonl")) GTEST_SKIP() << "no shared data at " << kShared;
  EXPECT_EQ(dflash::data::read_prompts(kShared + "/gsm8k_test.jsonl").size(), 1319u);
  EXPECT_EQ(dflash::data::read_prompts(kShared + "/humaneval.jsonl.gz").size(), 164u);
  EXPECT_EQ(dflash::data::read_prompts(kShared + "/mt_bench_questions.jsonl").size(), 80u);
  EXPECT_EQ(dflash::data::read_prompts(kShared + "/gsm8k_train.jsonl", 10).size(), 10u);
}

TEST(HeldOut, EvaluationSetsNeverTrain) {
  using dflash::data::benchmark_name;
  using dflash::data::check_split_allowed;
  EXPECT_EQ(benchmark_name("/x/gsm8k_test.jsonl"), "gsm8k_test");
  EXPECT_EQ(benchmark_name("/x/humaneval.jsonl.gz"), "humaneval");
  EXPECT_EQ(benchmark_name("/x/mt_bench_questions.jsonl"), "mt_bench");
  EXPECT_EQ(benchmark_name("/x/vicuna_bench_questions.jsonl"), "vicuna_bench");
  EXPECT_EQ(benchmark_name(write("gsm8k_train.jsonl", "{\"question\":\"q\"}\n")), "");
  // Renamed copies are recognised by their records.
  EXPECT_EQ(benchmark_name(write("renamed1.jsonl", "{\"task_id\":\"HumanEval/0\",\"prompt\":\"p\"}\n")), "humaneval");
  EXPECT_EQ(benchmark_name(write("renamed2.jsonl", "{\"question_id\":81,\"category\":\"w\",\"turns\":[\"t\"]}\n")),
            "mt_bench");
  EXPECT_THROW(check_split_allowed("/x/gsm8k_test.jsonl", "train"), std::invalid_argument);
  EXPECT_NO_THROW(check_split_allowed("/x/gsm8k_test.jsonl", "eval"));
  EXPECT_NO_THROW(check_split_allowed("/x/gsm8k_train.jsonl", "train"));
  EXPECT_THROW(check_split_allowed("/x/gsm8k_train.jsonl", "dev"), std::invalid_argument);
}

TEST(HeldOut, CollectsEvaluationPromptTexts) {
  const std::string d = dir() + "/heldout";
  std::filesystem::create_directories(d);
  std::ofstream(d + "/gsm8k_test.jsonl") << "{\"question\":\"secret\"}\n";
  std::ofstream(d + "/gsm8k_train.jsonl") << "{\"question\":\"fine\"}\n";
  const auto texts = dflash::data::held_out_texts(d);
  EXPECT_EQ(texts.count("secret"), 1u);
  EXPECT_EQ(texts.count("fine"), 0u);
  EXPECT_TRUE(dflash::data::held_out_texts(d + "/none").empty());
}

// Issue 19: a damaged .jsonl.gz used to read as an empty file (0 prompts, exit 0).
TEST(PromptSources, CorruptGzipIsAnError) {
  const std::string good = write("ok.jsonl", "{\"question\":\"q1\"}\n{\"question\":\"q2\"}\n");
  ASSERT_EQ(std::system(("gzip -kf '" + good + "'").c_str()), 0);
  std::ifstream in(good + ".gz", std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(gz.size(), 20u);
  EXPECT_EQ(dflash::data::read_prompts(good + ".gz").size(), 2u);
  auto error_of = [](const std::string& path) {
    try {
      dflash::data::read_prompts(path);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string cut = write("cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  EXPECT_NE(error_of(cut).find(cut + ": corrupt or truncated gzip data"), std::string::npos) << error_of(cut);
  const std::string header_only = write("header.jsonl.gz", gz.substr(0, 10));
  EXPECT_NE(error_of(header_only).find("corrupt or truncated gzip data"), std::string::npos) << error_of(header_only);
  std::string flipped = gz;
  flipped[gz.size() - 6] ^= 0x55;  // the CRC/length trailer
  const std::string bad_crc = write("crc.jsonl.gz", flipped);
  EXPECT_NE(error_of(bad_crc).find("corrupt or truncated gzip data"), std::string::npos) << error_of(bad_crc);
  const std::string plain = write("plain.jsonl.gz", "{\"question\":\"q\"}\n");
  EXPECT_NE(error_of(plain).find("named .gz but not gzip-compressed"), std::string::npos) << error_of(plain);
  const std::string empty = write("empty.jsonl", "\n\n");
  EXPECT_NE(error_of(empty).find("holds no prompts"), std::string::npos) << error_of(empty);
}

TEST(PromptSources, TokenIdsMustBeIntegers) {
  auto error_of = [](const std::string& text) {
    try {
      dflash::data::parse_prompts(text, "p.jsonl");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("{\"prompt_ids\": [1, 2.0]}\n").find("p.jsonl:1: field 'prompt_ids[1]' is 2.0, expected a token id"),
            std::string::npos);
  EXPECT_NE(error_of("{\"prompt_ids\": [18446744073709551615]}\n").find("is 18446744073709551615"), std::string::npos);
  EXPECT_NE(error_of("{\"question\": \"a\", \"question\": \"b\"}\n").find("appears twice"), std::string::npos);
  const auto records = [](const std::string& text) { return dflash::data::parse_token_records(text, "s.jsonl", -1, false); };
  EXPECT_EQ(records("{\"input_ids\": [1, 2], \"loss_mask\": [0, true]}\n").front().mask, (std::vector<int64_t>{0, 1}));
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {"{\"input_ids\": [1, 2.7], \"loss_mask\": [0, 1]}", "s.jsonl:1: input_ids[1] is 2.7, expected a token id"},
           {"{\"input_ids\": [1, -3], \"loss_mask\": [0, 1]}", "input_ids[1] is -3"},
           {"{\"input_ids\": [1, 2], \"loss_mask\": [0, 2]}", "loss_mask[1] is 2, expected 0, 1, true or false"},
           {"{\"input_ids\": [1, 2], \"loss_mask\": [0, 1], \"index\": 1.5}", "index is 1.5"}}) {
    try {
      records(line + "\n");
      ADD_FAILURE() << line;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(ShardIndex, NamesLayersAndMetadataAreChecked) {
  using dflash::data::parse_hidden_meta;
  using dflash::data::parse_layer_ids;
  using dflash::data::parse_shard_index;
  EXPECT_EQ(parse_layer_ids("1, 9,17", "x"), (std::vector<int64_t>{1, 9, 17}));
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of([&] { parse_layer_ids("1,9,1", "m"); }).find("m: target_layer_ids '1,9,1' lists layer 1 twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_layer_ids("1,9x", "m"); }).find("comma list of layer indices"), std::string::npos);
  const std::string idx = R"({"format": "dflash-hidden-v1", "shards": [{"file": "a.safetensors"}, {"file": "b.safetensors"}]})";
  EXPECT_EQ(parse_shard_index(idx, "d/index.json"), (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
  EXPECT_NE(error_of([&] {
              parse_shard_index(R"({"format": "dflash-hidden-v1", "shards": [{"file": "../../etc/x"}]})", "d/index.json");
            }).find("must be a plain file name"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_shard_index(R"({"format": "dflash-hidden-v1", "shards": [{"file": "a"}, {"file": "a"}]})", "i");
            }).find("listed twice"),
            std::string::npos);
  EXPECT_EQ(parse_hidden_meta({{"target_layer_ids", "1,2"}, {"hidden_size", "576"}}, "s").hidden_size, 576);
  EXPECT_NE(error_of([&] { parse_hidden_meta({{"target_layer_ids", "1"}, {"hidden_size", "576abc"}}, "s"); })
                .find("metadata hidden_size is '576abc'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_hidden_meta({{"target_layer_ids", "1"}, {"hidden_size", "8"}, {"target_num_layers", "99999999999"}}, "s");
            }).find("target_num_layers is '99999999999'"),
            std::string::npos);
}
