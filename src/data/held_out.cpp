#include "held_out.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dflash::data {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The first non-empty line as JSON (null when unreadable or not JSON).
nlohmann::json first_record(const std::string& path) {
  try {
    const std::string text = read_text_file(path);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      return nlohmann::json::parse(line);
    }
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // namespace

std::string benchmark_from_file_name(const std::string& name) {
  const std::string base = lower(std::filesystem::path(name).filename().string());
  if (base.find("humaneval") != std::string::npos) return "humaneval";
  if (base.find("mt_bench") != std::string::npos || base.find("mt-bench") != std::string::npos) return "mt_bench";
  if (base.find("vicuna") != std::string::npos) return "vicuna_bench";
  if (base.find("gsm8k") != std::string::npos && base.find("test") != std::string::npos) return "gsm8k_test";
  return "";
}

std::string held_out_record_reason(const nlohmann::json& record) {
  if (!record.is_object()) return "";
  if (record.contains("split") && !(record["split"].is_string() && record["split"].get<std::string>() == "train"))
    return "its split is " + record["split"].dump() + " (only \"train\" samples are trained on)";
  if (record.contains("source") && record["source"].is_string()) {
    const std::string b = benchmark_from_file_name(record["source"].get<std::string>());
    if (!b.empty()) return "its source " + record["source"].dump() + " is the evaluation set '" + b + "'";
  }
  return "";
}

std::string benchmark_name(const std::string& path) {
  if (const std::string b = benchmark_from_file_name(path); !b.empty()) return b;
  const nlohmann::json j = first_record(path);
  if (j.is_object()) {
    if (j.contains("task_id") && j["task_id"].is_string() &&
        j["task_id"].get<std::string>().rfind("HumanEval", 0) == 0)
      return "humaneval";
    if (j.contains("question_id") && j.contains("turns")) return "mt_bench";
  }
  return "";
}

void check_split_allowed(const std::string& path, const std::string& split) {
  if (split != "train" && split != "eval")
    throw std::invalid_argument("--split must be 'train' or 'eval', got '" + split + "'");
  if (split != "train") return;
  const std::string b = benchmark_name(path);
  if (!b.empty())
    throw std::invalid_argument(path + ": is the evaluation set '" + b +
                                "'; it never becomes training data (use --split eval)");
}

std::set<std::string> held_out_texts(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().string();
    const std::string name = e.path().filename().string();
    if (name.find(".jsonl") == std::string::npos || benchmark_name(p).empty()) continue;
    for (const auto& pr : read_prompts(p)) out.insert(prompt_user_text(pr));
  }
  return out;
}

}  // namespace dflash::data
