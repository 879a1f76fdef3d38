#include "feature_shard_writer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "atomic_file.h"
#include "settings_file.h"

namespace fs = std::filesystem;

namespace dflash::data {

FeatureShardWriter::FeatureShardWriter(const fs::path& dir, const std::string& part, const HiddenMeta& meta,
                                       const nlohmann::json& settings, int64_t samples_per_shard)
    : dir_(dir), index_path_(dir / ("index-" + part + ".json")), part_(part), meta_(meta), per_shard_(samples_per_shard) {
  if (per_shard_ < 1) throw std::invalid_argument("feature shards: samples per shard must be >= 1");
  fs::create_directories(dir_);
  index_ = {{"format", kDflashHiddenFormat}, {"settings", settings}, {"shards", nlohmann::json::array()}};
  if (fs::exists(index_path_)) {
    const nlohmann::json old = read_json_file(index_path_.string());
    check_recorded_settings(old, settings, index_path_.string(), "use another --hidden-out or the same settings");
    // Keep the listed shards that are still whole; a missing or resized one loses its samples (recomputed).
    try {
      for (const auto& s : old.value("shards", nlohmann::json::array())) {
        const fs::path f = dir_ / s.at("file").get<std::string>();
        std::error_code ec;
        const auto bytes = fs::file_size(f, ec);
        if (ec || int64_t(bytes) != s.at("bytes").get<int64_t>()) {
          std::fprintf(stderr, "%s: missing or truncated; its samples' features are computed again\n", f.string().c_str());
          continue;
        }
        for (const auto& i : s.at("prompt_indices")) covered_.insert(i.get<int64_t>());
        index_["shards"].push_back(s);
      }
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(index_path_.string() + ": each shard needs \"file\", \"bytes\" and \"prompt_indices\" (" +
                               e.what() + ")");
    }
  }
  // Our part's shard files that the index does not list: written by a run that died before listing them.
  std::set<std::string> listed;
  for (const auto& s : index_["shards"]) listed.insert(s["file"].get<std::string>());
  const std::string prefix = part_ + "-";
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !listed.count(name)) fs::remove(e.path());
  }
}

void FeatureShardWriter::add(int64_t prompt_index, HiddenSample sample) {
  if (covered_.count(prompt_index))
    throw std::logic_error("feature shards: prompt " + std::to_string(prompt_index) + " is already stored");
  for (const auto& [i, s] : buffer_)
    if (i == prompt_index) throw std::logic_error("feature shards: prompt " + std::to_string(prompt_index) + " added twice");
  sample.hidden_states = sample.hidden_states.to(at::kBFloat16).contiguous();
  buffer_.emplace_back(prompt_index, std::move(sample));
  if (int64_t(buffer_.size()) >= per_shard_) flush();
}

void FeatureShardWriter::flush() {
  if (buffer_.empty()) return;
  // Numbered after the highest listed shard, so a name is never reused for other samples.
  int64_t number = 0;
  for (const auto& s : index_["shards"]) number = std::max(number, s.value("number", int64_t(0)) + 1);
  char name[96];
  std::snprintf(name, sizeof name, "%s-%05lld.safetensors", part_.c_str(), static_cast<long long>(number));
  std::vector<HiddenSample> samples;
  nlohmann::json indices = nlohmann::json::array();
  int64_t tokens = 0;
  for (auto& [i, s] : buffer_) {
    indices.push_back(i);
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
                              {"prompt_indices", indices}});
  write_file_atomic(index_path_.string(), index_.dump(1) + "\n");  // the shard counts once the index lists it
  for (const auto& [i, s] : buffer_) covered_.insert(i);
  buffer_.clear();
}

}  // namespace dflash::data
