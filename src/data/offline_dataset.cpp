#include "offline_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "prompt_sources.h"
#include "safetensors.h"

namespace fs = std::filesystem;

namespace dflash::data {
namespace {

std::vector<std::string> files_with(const std::string& path, const std::vector<std::string>& exts) {
  auto matches = [&](const fs::path& p) {
    const std::string name = p.filename().string();
    for (const auto& e : exts)
      if (name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) return true;
    return false;
  };
  std::vector<std::string> out;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && matches(e.path())) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
  } else if (fs::is_regular_file(path)) {
    out.push_back(path);
  } else {
    throw std::invalid_argument(path + ": no such file or folder");
  }
  return out;
}

void check_sample(const Sample& s, const std::string& where) {
  if (s.input_ids.dim() != 1 || s.loss_mask.dim() != 1 || s.input_ids.size(0) != s.loss_mask.size(0))
    throw std::invalid_argument(where + ": input_ids and loss_mask must be [S] of the same length");
  if (s.features.defined() && (s.features.dim() != 2 || s.features.size(0) != s.input_ids.size(0)))
    throw std::invalid_argument(where + ": hidden_states must be [S, n*H] with S = " +
                                std::to_string(s.input_ids.size(0)) + ", got " + c10::str(s.features.sizes()));
  if (s.last_hidden.defined() && (s.last_hidden.dim() != 2 || s.last_hidden.size(0) != s.input_ids.size(0)))
    throw std::invalid_argument(where + ": last_hidden must be [S, H]");
}

class DflashHidden : public SampleSource {
 public:
  explicit DflashHidden(const std::string& path) : path_(path), shards_(path) {}
  int64_t size() const override { return shards_.size(); }
  bool has_features() const override { return true; }
  std::string describe() const override {
    std::string d = path_ + " (" + kDflashHiddenFormat + ", " + std::to_string(shards_.size()) + " samples";
    if (shards_.skipped_on_open() > 0) d += ", " + std::to_string(shards_.skipped_on_open()) + " skipped";
    return d + ")";
  }
  Sample get(int64_t i) const override {
    // A non-finite sample is replaced by the next valid one: the step's batch stays full and deterministic.
    for (int64_t t = 0; t < size(); ++t) {
      const int64_t j = (i + t) % size();
      if (auto h = shards_.get(j)) return Sample{h->input_ids, h->loss_mask, h->hidden_states, h->last_hidden};
    }
    throw std::invalid_argument(path_ + ": every sample holds NaN or Inf (see warnings above)");
  }
  std::vector<int64_t> target_layer_ids() const override { return shards_.meta().target_layer_ids; }
  int64_t target_num_layers() const override { return shards_.meta().target_num_layers; }
  int64_t skipped() const override { return shards_.skipped(); }

 private:
  std::string path_;
  HiddenShards shards_;
};

std::vector<char> read_maybe_gzip(const std::string& path) {
  // .gz names are decompressed (corrupt or truncated gzip data is an error); FIFOs and folders are refused.
  const std::string s = read_text_file(path);
  return std::vector<char>(s.begin(), s.end());
}

at::Tensor squeeze_batch(const at::Tensor& t, int64_t dims) {
  return (t.dim() == dims + 1 && t.size(0) == 1) ? t.squeeze(0) : t;
}

class SpecForge : public SampleSource {
 public:
  explicit SpecForge(const std::string& path) : path_(path), files_(files_with(path, {".ckpt", ".pt", ".gz"})) {
    if (files_.empty()) throw std::invalid_argument(path + ": no *.ckpt / *.pt / *.gz SpecForge samples");
  }
  int64_t size() const override { return int64_t(files_.size()); }
  bool has_features() const override { return true; }
  std::string describe() const override {
    return path_ + " (SpecForge torch.save samples, " + std::to_string(files_.size()) + " files)";
  }
  Sample get(int64_t i) const override {
    const std::string& f = files_.at(size_t(i));
    c10::IValue v;
    try {
      v = torch::jit::pickle_load(read_maybe_gzip(f));
    } catch (const c10::Error& e) {
      throw std::invalid_argument(f + ": not a torch.save file LibTorch can read: " + e.what_without_backtrace());
    }
    if (!v.isGenericDict()) throw std::invalid_argument(f + ": expected a dict (input_ids, loss_mask, hidden_states)");
    const auto d = v.toGenericDict();
    auto get = [&](const char* key, bool required) -> at::Tensor {
      for (const auto& e : d)
        if (e.key().isString() && e.key().toStringRef() == key) {
          if (!e.value().isTensor()) throw std::invalid_argument(f + ": '" + key + "' is not a tensor");
          return e.value().toTensor();
        }
      if (required) throw std::invalid_argument(f + ": key '" + std::string(key) + "' missing");
      return {};
    };
    Sample s;
    s.input_ids = squeeze_batch(get("input_ids", true), 1).to(at::kLong);
    s.loss_mask = squeeze_batch(get("loss_mask", true), 1).ne(0);
    // SpecForge's own offline writer names the concatenated target layers "aux_hidden_state" and the
    // final-normed last layer "hidden_state"; the DFlash-style dumps use "hidden_states".
    at::Tensor feats = get("hidden_states", false);
    if (!feats.defined()) feats = get("aux_hidden_state", false);
    if (!feats.defined()) throw std::invalid_argument(f + ": key 'hidden_states' (or 'aux_hidden_state') missing");
    s.features = squeeze_batch(feats, 2);
    at::Tensor last = get("last_hidden_states", false);
    if (!last.defined()) last = get("hidden_state", false);
    if (last.defined()) s.last_hidden = squeeze_batch(last, 2);
    check_sample(s, f);
    return s;
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

}  // namespace

std::unique_ptr<SampleSource> open_dflash_hidden(const std::string& path) { return std::make_unique<DflashHidden>(path); }
std::unique_ptr<SampleSource> open_specforge(const std::string& path) { return std::make_unique<SpecForge>(path); }

std::unique_ptr<SampleSource> open_samples(const std::string& path, SampleFormat format) {
  if (format == SampleFormat::Tokens) return open_token_samples(path);
  if (format == SampleFormat::Dflash) return open_dflash_hidden(path);
  if (format == SampleFormat::Specforge) return open_specforge(path);
  auto ends = [&](const std::string& e) { return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0; };
  if (ends(".jsonl") || ends(".jsonl.gz")) return open_token_samples(path);
  if (ends(".pt") || ends(".ckpt") || ends(".gz")) return open_specforge(path);
  if (fs::is_directory(path) && fs::exists(fs::path(path) / kHiddenIndexFile)) return open_dflash_hidden(path);
  if (ends(".safetensors") || fs::is_directory(path)) {
    if (fs::is_directory(path) && files_with(path, {".safetensors"}).empty()) {
      if (!files_with(path, {".ckpt", ".pt", ".gz"}).empty()) return open_specforge(path);
      if (!files_with(path, {".jsonl"}).empty())
        throw std::invalid_argument(path + ": a folder of JSONL files; pass one file as data");
      throw std::invalid_argument(path + ": no samples found (expected *.safetensors, *.jsonl, *.pt, *.ckpt)");
    }
    return is_dflash_hidden(path) ? open_dflash_hidden(path) : open_token_samples(path);
  }
  throw std::invalid_argument(path + ": cannot tell the data format from the name; set data_format");
}

}  // namespace dflash::data
