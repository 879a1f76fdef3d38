// Offline hidden states, format `dflash-hidden-v1` (our own): this header is its reader; its one writer is
// hidden_shard_writer.h (dump-hidden, regenerate --hidden-out, the tests; tests/python/hidden_format.py mirrors
// it for the Python tests). The trainer reads it through src/data/offline_dataset.h.
//   A folder of *.safetensors shards, or a single file. A folder is read through the union of its
//   `index-<part>.json` files in file-name order (one per writing process: shards listed complete, with their
//   samples' keys; layout in hidden_shard_writer.h); a folder with the single `index.json` of older dump-hidden
//   versions through its "shards" list; a folder without any index as every *.safetensors in file-name order.
//   Each shard's metadata holds "format": "dflash-hidden-v1", "target_layer_ids": "1,9,17" (comma list),
//   "hidden_size": "576", and from our writers also "target_num_layers", "target" and "split": "train"; for
//   sample i = 0..n-1 of the shard:
//     "{i}.input_ids"     int64 (any int) [S]
//     "{i}.loss_mask"     bool/uint8/int  [S]  (1 = assistant token, in the loss)
//     "{i}.hidden_states" any float [S, n*H]: outputs of target layers target_layer_ids (HF hidden_states[id+1])
//                         concatenated on the last axis in that order (bf16 from our writers)
//     "{i}.last_hidden"   any float [S, H] (optional): the target's final-normed last hidden state
//   Samples are numbered shard by shard.
// The reader checks every sample's dtypes and shapes from the headers on open and NaN/Inf when a sample is
// loaded; bad samples are skipped (named on stderr, counted), file-level damage (truncation, mixed layer ids,
// a split other than train) is an error naming the file.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shard_index.h"  // HiddenMeta, parse_layer_ids, the index format

namespace dflash::io {
class SafetensorsFile;
}

namespace dflash::data {

struct HiddenSample {
  at::Tensor input_ids;      // [S] int64
  at::Tensor loss_mask;      // [S] bool
  at::Tensor hidden_states;  // [S, n*H]
  at::Tensor last_hidden;    // [S, H] or undefined
};

// True when `path` (a safetensors file, or the first shard of a folder) carries dflash-hidden-v1 metadata.
bool is_dflash_hidden(const std::string& path);
// The shard files a reader opens for `path` (see the format above).
std::vector<std::string> hidden_shard_files(const std::string& path);

// Writes one shard atomically (temporary file, fsync, rename). `extra` adds metadata keys. Folders are written
// through HiddenShardWriter, which also keeps their index.
void write_hidden_shard(const std::string& path, const std::vector<HiddenSample>& samples, const HiddenMeta& meta,
                        const std::map<std::string, std::string>& extra = {});

class HiddenShards {
 public:
  explicit HiddenShards(const std::string& path);
  ~HiddenShards();
  int64_t size() const { return int64_t(index_.size()); }  // samples that passed the header checks
  // Sample i; nullopt (warned once, counted in skipped()) when its values hold NaN or Inf. Thread-safe.
  std::optional<HiddenSample> get(int64_t i) const;
  int64_t skipped() const;            // header-rejected + non-finite found so far
  int64_t skipped_on_open() const { return skipped_open_; }
  const HiddenMeta& meta() const { return meta_; }
  std::string where(int64_t i) const;  // "FILE sample K"

 private:
  std::string path_;
  HiddenMeta meta_;
  std::vector<std::shared_ptr<io::SafetensorsFile>> files_;
  std::vector<std::pair<size_t, int64_t>> index_;  // (file, sample number in the file)
  int64_t skipped_open_ = 0;
  mutable std::mutex mu_;
  mutable std::set<int64_t> nonfinite_;
};

}  // namespace dflash::data
