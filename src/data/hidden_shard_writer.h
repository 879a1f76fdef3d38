// The one writer of `dflash-hidden-v1` folders (the format and its reader: hidden_shards.h), used by
// `dflash data dump-hidden`, `dflash data regenerate --hidden-out` and the tests. Each writing process owns a
// part of the folder: shards `<part>-NNNNN.safetensors` and `index-<part>.json`, which lists the complete
// shards with the keys of the samples each holds:
//   {"format": "dflash-hidden-v1", "settings": {...},
//    "shards": [{"file": "<part>-00000.safetensors", "number": 0, "samples": n, "tokens": t, "bytes": b,
//                "keys": [...]}, ...]}
// Keys name samples in the writer's source: regenerate uses prompt indices, dump-hidden the line numbers of its
// samples JSONL. Readers take the union of every index-*.json, so the parts of several processes share a folder.
// Resumable: a shard is written atomically and counts once the index (also written atomically) lists it; a
// rerun with the same settings skips covered() keys; shard files no index lists (a crash between the two
// writes) are deleted. Samples still buffered when a process dies are computed again by the rerun.
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

class HiddenShardWriter {
 public:
  // `settings`: what a resumed run must share with the first (target, layers, dtype); a mismatch with an existing
  // index-<part>.json is an error naming the field and ending with `hint`. With `adopt_legacy_index`, a folder
  // holding the single index.json of older dump-hidden versions (shards keyed by first_record/records) becomes
  // index-<part>.json first, so such a dump resumes.
  HiddenShardWriter(const std::filesystem::path& dir, const std::string& part, const HiddenMeta& meta,
                    const nlohmann::json& settings, int64_t samples_per_shard, const std::string& hint,
                    bool adopt_legacy_index = false);
  ~HiddenShardWriter() = default;  // unflushed samples are dropped: a resume recomputes them (see above)

  // Keys whose samples are in listed shards.
  const std::set<int64_t>& covered() const { return covered_; }
  // Buffers one sample (hidden states and last hidden stored as bf16); writes a shard once samples_per_shard
  // are waiting.
  void add(int64_t key, HiddenSample sample);
  // Writes whatever is buffered as a (smaller) shard.
  void flush();
  int64_t samples() const { return int64_t(covered_.size()); }
  int64_t shards() const { return int64_t(index_["shards"].size()); }
  const std::filesystem::path& index_path() const { return index_path_; }

 private:
  void adopt_legacy_index(const nlohmann::json& settings, const std::string& hint);
  std::filesystem::path dir_, index_path_;
  std::string part_;
  HiddenMeta meta_;
  nlohmann::json index_;
  int64_t per_shard_;
  std::set<int64_t> covered_;
  std::vector<std::pair<int64_t, HiddenSample>> buffer_;
};

}  // namespace dflash::data
