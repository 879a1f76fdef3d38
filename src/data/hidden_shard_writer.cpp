#include "hidden_shard_writer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "atomic_file.h"
#include "settings_file.h"

namespace fs = std::filesystem;

namespace dflash::data {
namespace {

// A shard entry's keys; "prompt_indices" is how regenerate --hidden-out named them before.
const nlohmann::json& entry_keys(const nlohmann::json& s) {
  return s.contains("keys") ? s.at("keys") : s.at("prompt_indices");
}

}  // namespace

HiddenShardWriter::HiddenShardWriter(const fs::path& dir, const std::string& part, const HiddenMeta& meta,
                                     const nlohmann::json& settings, int64_t samples_per_shard, const std::string& hint,
                                     bool adopt_legacy)
    : dir_(dir), index_path_(dir / ("index-" + part + ".json")), part_(part), meta_(meta), per_shard_(samples_per_shard) {
  if (per_shard_ < 1) throw std::invalid_argument("hidden shards: samples per shard must be >= 1");
  // The folder is created by the first flush(), not here: a command refused after opening its writer leaves none.
  index_ = {{"format", kDflashHiddenFormat}, {"settings", settings}, {"shards", nlohmann::json::array()}};
  if (adopt_legacy && fs::exists(dir_ / kHiddenIndexFile)) adopt_legacy_index(settings, hint);
  if (fs::exists(index_path_)) {
    const nlohmann::json old = read_json_file(index_path_.string());
    check_recorded_settings(old, settings, index_path_.string(), hint);
    // Keep the listed shards that are still whole; a missing or resized one loses its samples (recomputed).
    try {
      for (const auto& s : old.value("shards", nlohmann::json::array())) {
        const fs::path f = dir_ / s.at("file").get<std::string>();
        std::error_code ec;
        const auto bytes = fs::file_size(f, ec);
        if (ec || int64_t(bytes) != s.at("bytes").get<int64_t>()) {
          std::fprintf(stderr, "%s: missing or truncated; its samples are computed again\n", f.string().c_str());
          continue;
        }
        for (const auto& k : entry_keys(s)) covered_.insert(k.get<int64_t>());
        index_["shards"].push_back(s);
      }
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(index_path_.string() + ": each shard needs \"file\", \"bytes\" and \"keys\" (" +
                               e.what() + ")");
    }
  }
  // Our part's shard files that the index does not list: written by a run that died before listing them.
  std::set<std::string> listed;
  for (const auto& s : index_["shards"]) listed.insert(s["file"].get<std::string>());
  const std::string prefix = part_ + "-";
  if (!fs::is_directory(dir_)) return;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !listed.count(name)) fs::remove(e.path());
  }
}

void HiddenShardWriter::adopt_legacy_index(const nlohmann::json& settings, const std::string& hint) {
  const fs::path legacy = dir_ / kHiddenIndexFile;
  const nlohmann::json old = read_json_file(legacy.string());
  check_recorded_settings(old, settings, legacy.string(), hint);
  if (!fs::exists(index_path_)) {
    nlohmann::json index = {{"format", kDflashHiddenFormat}, {"settings", settings}, {"shards", nlohmann::json::array()}};
    int64_t number = 0;
    try {
      for (const auto& s : old.value("shards", nlohmann::json::array())) {
        nlohmann::json keys = nlohmann::json::array();
        const int64_t first = s.at("first_record").get<int64_t>(), n = s.at("records").get<int64_t>();
        for (int64_t k = first; k < first + n; ++k) keys.push_back(k);  // every record it covered, stored or skipped
        index["shards"].push_back({{"file", s.at("file")}, {"number", number++}, {"samples", s.at("samples")},
                                   {"tokens", s.value("tokens", int64_t(0))}, {"bytes", s.at("bytes")},
                                   {"keys", keys}});
      }
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(legacy.string() + ": each shard needs \"file\", \"bytes\", \"first_record\" and "
                               "\"records\" (" + e.what() + ")");
    }
    write_file_atomic(index_path_.string(), index.dump(1) + "\n");
  }
  // Only now: readers prefer index.json while it exists, and both list the same shards.
  fs::remove(legacy);
  fsync_dir(dir_.string());
}

void HiddenShardWriter::add(int64_t key, HiddenSample sample) {
  if (covered_.count(key)) throw std::logic_error("hidden shards: sample " + std::to_string(key) + " is already stored");
  for (const auto& [k, s] : buffer_)
    if (k == key) throw std::logic_error("hidden shards: sample " + std::to_string(key) + " added twice");
  sample.hidden_states = sample.hidden_states.to(at::kBFloat16).contiguous();
  if (sample.last_hidden.defined()) sample.last_hidden = sample.last_hidden.to(at::kBFloat16).contiguous();
  buffer_.emplace_back(key, std::move(sample));
  if (int64_t(buffer_.size()) >= per_shard_) flush();
}

void HiddenShardWriter::flush() {
  fs::create_directories(dir_);  // a finished run leaves its folder, even with nothing new in it
  if (buffer_.empty()) return;
  // Numbered after the highest listed shard, so a name is never reused for other samples.
  int64_t number = 0;
  for (const auto& s : index_["shards"]) number = std::max(number, s.value("number", int64_t(0)) + 1);
  char name[96];
  std::snprintf(name, sizeof name, "%s-%05lld.safetensors", part_.c_str(), static_cast<long long>(number));
  std::vector<HiddenSample> samples;
  nlohmann::json keys = nlohmann::json::array();
  int64_t tokens = 0;
  for (auto& [k, s] : buffer_) {
    keys.push_back(k);
    tokens += s.input_ids.size(0);
    samples.push_back(std::move(s));
  }
  const fs::path shard = dir_ / name;
  write_hidden_shard(shard.string(), samples, meta_, {{"split", "train"}});
  index_["shards"].push_back({{"file", name},
                              {"number", number},
                              {"samples", int64_t(samples.size())},
                              {"tokens", tokens},
                              {"bytes", int64_t(fs::file_size(shard))},
                              {"keys", keys}});
  index_["samples"] = int64_t(covered_.size() + buffer_.size());
  write_file_atomic(index_path_.string(), index_.dump(1) + "\n");  // the shard counts once the index lists it
  for (const auto& [k, s] : buffer_) covered_.insert(k);
  buffer_.clear();
}

}  // namespace dflash::data
