#include "hidden_shards.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "safetensors.h"
#include "input_file.h"

namespace fs = std::filesystem;

namespace dflash::data {
namespace {

constexpr int kMaxNamedSkips = 20;  // warnings printed one by one; the rest only counted

std::string meta_or_throw(const io::SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end())
    throw std::invalid_argument(f.path() + ": metadata '" + key + "' missing (expected a " +
                                std::string(kDflashHiddenFormat) + " shard)");
  return it->second;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool one_of(const std::string& d, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (d == n) return true;
  return false;
}

// Why sample `k` of `f` is unusable, from the header alone ("" when it is fine).
std::string header_problem(const io::SafetensorsFile& f, int64_t k, const HiddenMeta& m) {
  const std::string p = std::to_string(k) + ".";
  for (const char* req : {"input_ids", "loss_mask", "hidden_states"})
    if (!f.contains(p + req)) return std::string("tensor '") + p + req + "' missing";
  const auto& ids = f.entry(p + "input_ids");
  const auto& mask = f.entry(p + "loss_mask");
  const auto& hs = f.entry(p + "hidden_states");
  if (!one_of(ids.dtype, {"I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64"}))
    return "input_ids has dtype " + ids.dtype + ", expected an integer type";
  if (!one_of(mask.dtype, {"BOOL", "U8", "I8", "I16", "I32", "I64"}))
    return "loss_mask has dtype " + mask.dtype + ", expected BOOL/U8/integer";
  if (!one_of(hs.dtype, {"BF16", "F16", "F32", "F64"}))
    return "hidden_states has dtype " + hs.dtype + ", expected BF16/F16/F32/F64";
  if (ids.shape.size() != 1 || ids.shape[0] < 2) return "input_ids has shape " + shape_str(ids.shape) + ", expected [S], S >= 2";
  const int64_t S = ids.shape[0], nh = int64_t(m.target_layer_ids.size()) * m.hidden_size;
  if (mask.shape != std::vector<int64_t>{S})
    return "loss_mask has shape " + shape_str(mask.shape) + ", expected [" + std::to_string(S) + "]";
  if (hs.shape != std::vector<int64_t>{S, nh})
    return "hidden_states has shape " + shape_str(hs.shape) + ", expected [" + std::to_string(S) + ", " +
           std::to_string(nh) + "] (S, layers x hidden_size)";
  if (f.contains(p + "last_hidden")) {
    const auto& lh = f.entry(p + "last_hidden");
    if (!one_of(lh.dtype, {"BF16", "F16", "F32", "F64"}))
      return "last_hidden has dtype " + lh.dtype + ", expected BF16/F16/F32/F64";
    if (lh.shape != std::vector<int64_t>{S, m.hidden_size})
      return "last_hidden has shape " + shape_str(lh.shape) + ", expected [" + std::to_string(S) + ", " +
             std::to_string(m.hidden_size) + "]";
  }
  return "";
}

std::vector<std::string> safetensors_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

namespace {

// The shard files an index lists, as paths beside it.
std::vector<std::string> listed_shards(const fs::path& index) {
  std::string text;
  try {
    text = io::read_regular_file(index.string(), 256 << 20);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  std::vector<std::string> out;
  for (const auto& f : parse_shard_index(text, index.string())) out.push_back((index.parent_path() / f).string());
  return out;
}

}  // namespace

std::vector<std::string> hidden_shard_files(const std::string& path) {
  if (fs::is_regular_file(path)) return {path};
  if (!fs::is_directory(path)) throw std::invalid_argument(path + ": no such file or folder");
  const fs::path index = fs::path(path) / kHiddenIndexFile;
  if (fs::exists(index)) return listed_shards(index);
  // Parts written by several regenerate processes: index-<part>.json each, read in name order.
  std::vector<fs::path> parts;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("index-", 0) == 0 && name.size() > 11 && name.compare(name.size() - 5, 5, ".json") == 0)
      parts.push_back(e.path());
  }
  if (parts.empty()) return safetensors_in(path);
  std::sort(parts.begin(), parts.end());
  std::vector<std::string> out;
  for (const auto& p : parts)
    for (auto& f : listed_shards(p)) out.push_back(std::move(f));
  return out;
}

bool is_dflash_hidden(const std::string& path) {
  const auto files = hidden_shard_files(path);
  if (files.empty()) return false;
  const auto f = io::SafetensorsFile::open(files.front());
  const auto it = f.metadata().find("format");
  return it != f.metadata().end() && it->second == kDflashHiddenFormat;
}

void write_hidden_shard(const std::string& path, const std::vector<HiddenSample>& samples, const HiddenMeta& meta,
                        const std::map<std::string, std::string>& extra) {
  std::vector<std::pair<std::string, at::Tensor>> t;
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string p = std::to_string(i) + ".";
    t.emplace_back(p + "input_ids", samples[i].input_ids.to(at::kLong));
    t.emplace_back(p + "loss_mask", samples[i].loss_mask.to(at::kByte));
    t.emplace_back(p + "hidden_states", samples[i].hidden_states);
    if (samples[i].last_hidden.defined()) t.emplace_back(p + "last_hidden", samples[i].last_hidden);
  }
  std::map<std::string, std::string> m = extra;
  m["format"] = kDflashHiddenFormat;
  m["target_layer_ids"] = join_ids(meta.target_layer_ids);
  m["hidden_size"] = std::to_string(meta.hidden_size);
  if (meta.target_num_layers > 0) m["target_num_layers"] = std::to_string(meta.target_num_layers);
  if (!meta.target.empty()) m["target"] = meta.target;
  io::save_safetensors(path, t, m);  // temporary file + fsync + rename
}

HiddenShards::HiddenShards(const std::string& path) : path_(path) {
  std::vector<std::string> problems;
  for (const auto& fname : hidden_shard_files(path)) {
    if (!fs::exists(fname)) throw std::invalid_argument(fname + ": listed in " + kHiddenIndexFile + " but missing");
    std::shared_ptr<io::SafetensorsFile> file;
    try {
      file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(fname));
    } catch (const std::exception& e) {  // truncated or otherwise damaged: the whole shard is unusable
      throw std::invalid_argument(fname + ": unreadable " + kDflashHiddenFormat + " shard (" + e.what() +
                                  "); delete it and re-run `dflash data dump-hidden` to rewrite it");
    }
    const auto& f = *file;
    if (meta_or_throw(f, "format") != kDflashHiddenFormat)
      throw std::invalid_argument(fname + ": metadata format is '" + f.metadata().at("format") + "', expected " +
                                  kDflashHiddenFormat);
    const auto split = f.metadata().find("split");
    if (split != f.metadata().end() && split->second != "train")
      throw std::invalid_argument(fname + ": split is '" + split->second +
                                  "': evaluation data never becomes training data");
    const HiddenMeta m = parse_hidden_meta(f.metadata(), fname);
    if (files_.empty()) {
      meta_ = m;
    } else if (m.target_layer_ids != meta_.target_layer_ids) {
      throw std::invalid_argument(fname + ": target_layer_ids " + join_ids(m.target_layer_ids) +
                                  " differ from the first shard's " + join_ids(meta_.target_layer_ids));
    } else if (m.hidden_size != meta_.hidden_size) {
      throw std::invalid_argument(fname + ": hidden_size " + std::to_string(m.hidden_size) + " differs from the first shard's " +
                                  std::to_string(meta_.hidden_size) + " (feature width = layers x hidden_size)");
    }
    int64_t n = 0;
    while (f.contains(std::to_string(n) + ".input_ids")) ++n;
    if (n == 0) throw std::invalid_argument(fname + ": no samples (expected tensors '0.input_ids', ...)");
    for (int64_t k = 0; k < n; ++k) {
      const std::string why = header_problem(f, k, meta_);
      if (why.empty()) {
        index_.push_back({files_.size(), k});
      } else {
        ++skipped_open_;
        problems.push_back(fname + " sample " + std::to_string(k) + ": " + why);
      }
    }
    files_.push_back(file);
  }
  if (files_.empty()) throw std::invalid_argument(path + ": no *.safetensors shards");
  if (!problems.empty()) {
    for (size_t i = 0; i < problems.size() && i < size_t(kMaxNamedSkips); ++i)
      std::fprintf(stderr, "warning: %s; skipped\n", problems[i].c_str());
    std::fprintf(stderr, "warning: %s: skipped %lld of %lld samples with wrong shapes or dtypes%s\n", path.c_str(),
                 (long long)skipped_open_, (long long)(skipped_open_ + size()),
                 problems.size() > size_t(kMaxNamedSkips) ? " (first ones named above)" : "");
  }
  if (index_.empty()) throw std::invalid_argument(path + ": every sample was rejected (see warnings above)");
}

HiddenShards::~HiddenShards() = default;

std::string HiddenShards::where(int64_t i) const {
  const auto [fi, k] = index_.at(size_t(i));
  return files_[fi]->path() + " sample " + std::to_string(k);
}

int64_t HiddenShards::skipped() const {
  std::lock_guard<std::mutex> g(mu_);
  return skipped_open_ + int64_t(nonfinite_.size());
}

std::optional<HiddenSample> HiddenShards::get(int64_t i) const {
  const auto [fi, k] = index_.at(size_t(i));
  const auto& f = *files_[fi];
  const std::string p = std::to_string(k) + ".";
  HiddenSample s;
  s.input_ids = f.load(p + "input_ids").to(at::kLong);
  s.loss_mask = f.load(p + "loss_mask").ne(0);
  s.hidden_states = f.load(p + "hidden_states");
  if (f.contains(p + "last_hidden")) s.last_hidden = f.load(p + "last_hidden");
  const char* bad = !at::isfinite(s.hidden_states).all().item<bool>() ? "hidden_states"
                    : s.last_hidden.defined() && !at::isfinite(s.last_hidden).all().item<bool>() ? "last_hidden"
                                                                                                  : nullptr;
  if (!bad) return s;
  std::lock_guard<std::mutex> g(mu_);
  if (nonfinite_.insert(i).second)
    std::fprintf(stderr, "warning: %s sample %lld: %s holds NaN or Inf; skipped (%lld samples skipped so far)\n",
                 f.path().c_str(), (long long)k, bad, (long long)(skipped_open_ + int64_t(nonfinite_.size())));
  return std::nullopt;
}

}  // namespace dflash::data
