// The torch-free part of reading dflash-hidden-v1 feature shards (format: hidden_shards.h): the index files that
// list the shards, and the metadata strings each shard carries. Kept apart so the fuzz target can reach them
// without LibTorch.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dflash::data {

inline constexpr const char* kDflashHiddenFormat = "dflash-hidden-v1";
inline constexpr const char* kHiddenIndexFile = "index.json";  // the legacy single index (read, adopted)

struct HiddenMeta {
  std::vector<int64_t> target_layer_ids;
  int64_t hidden_size = 0;
  int64_t target_num_layers = 0;  // 0: not recorded (shards not written by dump-hidden)
  std::string target;             // the target's identity as recorded ("" when not)
};

// "1,9,17" -> {1, 9, 17} (util/index_list.h's grammar: integers in [0, 2^31-1], each once); a list that is not one,
// or an empty one, is an std::invalid_argument naming `where`.
std::vector<int64_t> parse_layer_ids(const std::string& s, const std::string& where);
std::string join_ids(const std::vector<int64_t>& ids);

// The shard file names an index lists ({"format": "dflash-hidden-v1", "shards": [{"file": NAME}, ...]}), in
// order. Names must be plain file names in the index's folder, each listed once. `index_path` names it in errors.
std::vector<std::string> parse_shard_index(const std::string& text, const std::string& index_path);

// A shard's metadata ("target_layer_ids", "hidden_size", optional "target_num_layers", "target"), checked:
// integers as written in full, in range. `where` names the shard in errors. Does not check "format"/"split".
HiddenMeta parse_hidden_meta(const std::map<std::string, std::string>& metadata, const std::string& where);

}  // namespace dflash::data
