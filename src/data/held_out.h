// The train / held-out policy: evaluation sets (GSM8K test, HumanEval, MT-Bench, Vicuna-bench) never become
// training data. A file is an evaluation set when its name says so or its lines have a benchmark's shape
// (HumanEval task ids, MT-Bench question ids with turns). For training data, prompts whose user text equals
// a prompt of any evaluation set found beside the input are dropped too, so a renamed copy cannot leak.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "prompt_sources.h"

namespace dflash::data {

// The benchmark's name ("gsm8k_test", "humaneval", "mt_bench", "vicuna_bench") or "" for a training source.
std::string benchmark_name(const std::string& path);

// The benchmark a file name alone points to ("" when none); benchmark_name also looks inside the file.
std::string benchmark_from_file_name(const std::string& name);

// Why a sample record (a line of `dflash data regenerate` output) must never be trained on, "" when it may:
// its "split" is not "train", or its "source" file name is an evaluation set. Records without these fields pass.
std::string held_out_record_reason(const nlohmann::json& record);

// Throws when `path` is an evaluation set and split == "train"; checks split is "train" or "eval".
void check_split_allowed(const std::string& path, const std::string& split);

// User texts of every evaluation-set file in `dir` (non-recursive; missing dir -> empty).
std::set<std::string> held_out_texts(const std::string& dir);

}  // namespace dflash::data
