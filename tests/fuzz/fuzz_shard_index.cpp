// Hidden-state shards (dflash-hidden-v1): the index.json shard list, and a shard's metadata strings
// (target_layer_ids, hidden_size, target_num_layers) given here as "key=value" lines.
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include "fuzz_common.h"
#include "shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean("fuzz/index.json", [&] {
    for (const auto& f : data::parse_shard_index(text, "fuzz/index.json"))
      if (f.empty() || f.find('/') != std::string::npos) fuzz::violated("index accepted shard name '" + f + "'");
  });
  std::map<std::string, std::string> meta;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  fuzz::expect_clean("fuzz-shard", [&] {
    const data::HiddenMeta m = data::parse_hidden_meta(meta, "fuzz-shard");
    if (m.hidden_size <= 0 || m.target_layer_ids.empty()) fuzz::violated("accepted metadata without layers or size");
    (void)data::join_ids(m.target_layer_ids);
  });
  fuzz::expect_clean("fuzz ids", [&] { data::parse_layer_ids(text, "fuzz ids"); });
  return 0;
}
