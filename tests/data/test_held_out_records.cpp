// held_out_record_reason: which sample records (lines of `dflash data regenerate` output) are never trained on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "held_out.h"

namespace dflash::data {
namespace {

TEST(HeldOutRecords, TrainSamplesPass) {
  EXPECT_EQ(held_out_record_reason(nlohmann::json::parse(R"({"split": "train", "source": "gsm8k_train.jsonl"})")), "");
  EXPECT_EQ(held_out_record_reason(nlohmann::json::parse(R"({"input_ids": [1, 2], "loss_mask": [0, 1]})")), "");
}

TEST(HeldOutRecords, EvalSplitOrEvalSourceIsRefused) {
  EXPECT_NE(held_out_record_reason(nlohmann::json::parse(R"({"split": "eval"})")).find("split is \"eval\""),
            std::string::npos);
  EXPECT_NE(held_out_record_reason(nlohmann::json::parse(R"({"split": 3})")), "");
  for (const char* src : {"humaneval.jsonl", "mt_bench.jsonl", "gsm8k_test.jsonl", "vicuna_bench.jsonl"}) {
    const nlohmann::json r = {{"split", "train"}, {"source", src}};
    EXPECT_NE(held_out_record_reason(r).find("evaluation set"), std::string::npos) << src;
  }
}

TEST(HeldOutRecords, FileNameAloneNamesTheBenchmark) {
  EXPECT_EQ(benchmark_from_file_name("/x/GSM8K_test.jsonl"), "gsm8k_test");
  EXPECT_EQ(benchmark_from_file_name("gsm8k_train.jsonl"), "");
  EXPECT_EQ(benchmark_from_file_name("prompts.jsonl"), "");
}

}  // namespace
}  // namespace dflash::data
