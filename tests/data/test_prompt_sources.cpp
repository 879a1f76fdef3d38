// Prompt formats of ../shared/data and the generic chat format; the held-out policy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "held_out.h"
#include "prompt_sources.h"

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
