#include "shard_index.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "index_list.h"
#include "strict_json.h"

namespace dflash::data {
namespace {

// A whole decimal integer in [lo, hi] ("576abc", " 5", "" and 2^64 are not).
bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) return false;  // 19 digits can pass 2^63
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string meta_or_throw(const std::map<std::string, std::string>& m, const std::string& key, const std::string& where) {
  const auto it = m.find(key);
  if (it == m.end())
    throw std::invalid_argument(where + ": metadata '" + key + "' missing (expected a " +
                                std::string(kDflashHiddenFormat) + " shard)");
  return it->second;
}

}  // namespace

std::vector<int64_t> parse_layer_ids(const std::string& s, const std::string& where) {
  const util::IndexList l = util::read_index_list(s);
  if (!l.bad_item.empty())
    throw std::invalid_argument(where + ": target_layer_ids must be a comma list of layer indices (integers in "
                                "[0, 2147483647]), got '" + s + "'");
  if (l.repeated >= 0)
    throw std::invalid_argument(where + ": target_layer_ids '" + s + "' lists layer " + std::to_string(l.repeated) +
                                " twice (each target layer once)");
  if (l.ids.empty()) throw std::invalid_argument(where + ": target_layer_ids is empty");
  return l.ids;
}

std::string join_ids(const std::vector<int64_t>& ids) { return util::join_indices(ids); }

std::vector<std::string> parse_shard_index(const std::string& text, const std::string& index_path) {
  nlohmann::json j;
  try {
    j = io::parse_json_strict(text);
  } catch (const io::JsonError& e) {
    throw std::invalid_argument(index_path + ": invalid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kDflashHiddenFormat || !j.contains("shards") ||
      !j["shards"].is_array())
    throw std::invalid_argument(index_path + ": expected {\"format\": \"" + kDflashHiddenFormat +
                                "\", \"shards\": [...]}");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& s : j["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string())
      throw std::invalid_argument(index_path + ": each shard needs a \"file\" name");
    const std::string f = s["file"].get<std::string>();
    // Shards live beside the index: "../x" or "/etc/x" would read files elsewhere.
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
      throw std::invalid_argument(index_path + ": shard file " + io::json_shown(s["file"]) +
                                  " must be a plain file name in the index's folder");
    if (!seen.insert(f).second)
      throw std::invalid_argument(index_path + ": shard file '" + f + "' is listed twice");
    out.push_back(f);
  }
  return out;
}

HiddenMeta parse_hidden_meta(const std::map<std::string, std::string>& metadata, const std::string& where) {
  HiddenMeta m;
  m.target_layer_ids = parse_layer_ids(meta_or_throw(metadata, "target_layer_ids", where), where + ": metadata");
  const std::string hs = meta_or_throw(metadata, "hidden_size", where);
  if (!parse_int(hs, 1, 2147483647, &m.hidden_size))
    throw std::invalid_argument(where + ": metadata hidden_size is '" + hs + "', expected an integer in [1, 2147483647]");
  if (auto it = metadata.find("target_num_layers"); it != metadata.end() &&
                                                    !parse_int(it->second, 1, 2147483647, &m.target_num_layers))
    throw std::invalid_argument(where + ": metadata target_num_layers is '" + it->second +
                                "', expected an integer in [1, 2147483647]");
  if (auto it = metadata.find("target"); it != metadata.end()) m.target = it->second;
  return m;
}

}  // namespace dflash::data
