// The drafter's offline features written while the target regenerates its replies (`dflash data regenerate
// --hidden-out DIR`), so no second pass over the samples (dump-hidden) is needed. Each regenerate process
// writes its own part of DIR: dflash-hidden-v1 shards `<part>-NNNNN.safetensors` and `index-<part>.json`,
// which lists the complete shards and the prompt indices each holds. Readers of DIR take the union of every
// index-*.json (hidden_shards.h), so the parts of `--shards N` processes share one folder.
// The samples JSONL stays the record of what was generated: its lines are appended as replies finish, while
// features are buffered until a shard fills. After a crash the JSONL may hold samples whose features were
// lost; a resumed run finds them (not in covered()) and recomputes them with one target forward each.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hidden_shards.h"

namespace dflash::data {

class FeatureShardWriter {
 public:
  // `settings`: what a resumed run must share with the first (target, layers, dtype); a mismatch with an
  // existing index-<part>.json is an error naming the field. Shards the index does not list (a crash between
  // writing a shard and listing it) are deleted.
  FeatureShardWriter(const std::filesystem::path& dir, const std::string& part, const HiddenMeta& meta,
                     const nlohmann::json& settings, int64_t samples_per_shard);
  ~FeatureShardWriter() = default;  // unflushed samples are dropped: a resume recomputes them (see above)

  // Prompt indices whose features are in listed shards.
  const std::set<int64_t>& covered() const { return covered_; }
  // Buffers one sample (features [S, n*H], stored as bf16); writes a shard once samples_per_shard are waiting.
  void add(int64_t prompt_index, HiddenSample sample);
  // Writes whatever is buffered as a (smaller) shard.
  void flush();
  int64_t samples() const { return int64_t(covered_.size()); }

 private:
  std::filesystem::path dir_, index_path_;
  std::string part_;
  HiddenMeta meta_;
  nlohmann::json index_;
  int64_t per_shard_;
  std::set<int64_t> covered_;
  std::vector<std::pair<int64_t, HiddenSample>> buffer_;
};

}  // namespace dflash::data
