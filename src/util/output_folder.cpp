#include "output_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include "output_file.h"

namespace fs = std::filesystem;

namespace dflash::util {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool starts_with(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }

std::vector<std::string>& added_export_files() {
  static std::vector<std::string> names;
  return names;
}

bool is_export_file(const std::string& name) {
  const auto& added = added_export_files();
  return std::any_of(std::begin(kExportFiles), std::end(kExportFiles), [&](const char* f) { return name == f; }) ||
         std::find(added.begin(), added.end(), name) != added.end();
}

// A drafter config as export writes it: the "dflash_config" key (a target's config.json never has it). The first
// MiB is plenty for a config and bounds what a hostile file costs.
bool is_drafter_config(const fs::path& config) {
  std::ifstream in(config, std::ios::binary);
  std::string head(1 << 20, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head.find("\"dflash_config\"") != std::string::npos;
}

bool is_model_file(const std::string& name) {
  for (const char* tail : {".safetensors", ".gguf", ".bin", ".pt", ".pth", ".safetensors.index.json"})
    if (ends_with(name, tail)) return true;
  return name == "config.json" || name == "tokenizer.json" || name == "tokenizer.model" ||
         name == "generation_config.json";
}

// "<part>-NNNNN.safetensors", a feature shard (hidden_shard_writer.cpp), not a model's "model-00001-of-00002...".
bool is_feature_shard(const std::string& name) {
  const std::string tail = ".safetensors";
  if (!ends_with(name, tail) || name.find("-of-") != std::string::npos || name.size() < tail.size() + 6) return false;
  const size_t digits = name.size() - tail.size() - 5;
  return name[digits - 1] == '-' &&
         std::all_of(name.begin() + digits, name.end() - tail.size(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_samples_file(const std::string& name) {
  return ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz") || ends_with(name, ".parquet");
}

}  // namespace

void add_export_file(const std::string& name) {
  auto& added = added_export_files();
  if (!is_export_file(name)) added.push_back(name);
}

FolderSurvey survey_folder(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::is_directory(path, ec)) return {};
  std::vector<std::pair<std::string, bool>> entries;  // name, is a folder
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    entries.emplace_back(it->path().filename().string(), it->is_directory(ec));
  if (ec) return {FolderContent::Other, "(unreadable: " + ec.message() + ")"};
  if (entries.empty()) return {};
  std::sort(entries.begin(), entries.end());
  auto first = [&](auto pred) -> std::string {
    for (const auto& [name, dir] : entries)
      if (pred(name, dir)) return dir ? name + "/" : name;
    return "";
  };
  std::string e = first([](const std::string& n, bool d) {
    return (n == "checkpoints" && d) || n == "drafter_config.json" || n == "metrics.jsonl";
  });
  if (!e.empty()) return {FolderContent::Run, e};
  e = first([](const std::string& n, bool d) {
    return !d && (n == "index.json" || (starts_with(n, "index-") && ends_with(n, ".json")) || is_feature_shard(n));
  });
  if (!e.empty()) return {FolderContent::Dataset, e};
  const bool only_export_files =
      std::all_of(entries.begin(), entries.end(), [](const auto& en) { return !en.second && is_export_file(en.first); });
  if (only_export_files && std::any_of(entries.begin(), entries.end(), [](const auto& en) { return en.first == "config.json"; }) &&
      is_drafter_config(fs::path(path) / "config.json"))
    return {FolderContent::DrafterExport, "config.json"};
  e = first([](const std::string& n, bool d) { return !d && is_model_file(n); });
  if (!e.empty()) return {FolderContent::Model, e};
  e = first([](const std::string& n, bool d) { return !d && is_samples_file(n); });
  if (!e.empty()) return {FolderContent::Dataset, e};
  return {FolderContent::Other, entries.front().second ? entries.front().first + "/" : entries.front().first};
}

const char* folder_content_name(FolderContent c) {
  switch (c) {
    case FolderContent::Nothing: return "nothing";
    case FolderContent::Run: return "a training run";
    case FolderContent::Dataset: return "a dataset";
    case FolderContent::DrafterExport: return "an exported drafter";
    case FolderContent::Model: return "a model";
    case FolderContent::Other: return "other files";
  }
  return "?";
}

void check_output_folder_use(const std::string& path, const std::string& what, OutputFolderUse use, bool force) {
  check_output_folder(path, what);
  const FolderSurvey s = survey_folder(path);
  if (s.content == FolderContent::Nothing) return;
  const std::string holds = what + ": '" + path + "' holds " + folder_content_name(s.content) + " (" + s.evidence + ")";
  using C = FolderContent;
  switch (use) {
    case OutputFolderUse::Export:
      if (s.content == C::DrafterExport) return;  // an earlier export: replaced file by file
      if (s.content == C::Other) {
        if (force) return;
        throw std::invalid_argument(what + ": '" + path + "' is a folder export did not make (it holds " + s.evidence +
                                    "); give a new or empty folder, or --force to write the export's files into it "
                                    "(its other files are kept)");
      }
      throw std::invalid_argument(holds + ": an export never writes into a model, a run or a dataset, even with "
                                  "--force; give a new folder");
    case OutputFolderUse::Run:
      if (s.content == C::Run || s.content == C::Other) return;
      throw std::invalid_argument(holds + ": a run folder is new, empty, or a run to resume; give another folder");
    case OutputFolderUse::Dataset:
      if (s.content == C::Dataset || s.content == C::Other) return;
      throw std::invalid_argument(holds + ": features go to a new or empty folder, or one of feature shards; give "
                                  "another folder");
    case OutputFolderUse::Plots:  // PNGs beside a run, a demo's outputs or samples; not into what gets served
      if (s.content != C::Model && s.content != C::DrafterExport) return;
      throw std::invalid_argument(holds + ": plots never go into a model or an export; give another folder");
  }
}

}  // namespace dflash::util
