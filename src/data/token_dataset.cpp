// Token samples for online training (the trainer runs the target): JSONL or safetensors.
#include <stdexcept>

#include <ATen/ATen.h>

#include "safetensors.h"
#include "sample_source.h"
#include "token_records.h"

namespace dflash::data {
namespace {

class TokenSamples : public SampleSource {
 public:
  explicit TokenSamples(const std::string& path) : path_(path) {
    if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
      const auto f = io::SafetensorsFile::open(path);
      for (int64_t i = 0; f.contains(std::to_string(i) + ".input_ids"); ++i) {
        const std::string p = std::to_string(i) + ".";
        if (!f.contains(p + "loss_mask")) throw std::invalid_argument(path + ": tensor '" + p + "loss_mask' missing");
        add(f.load(p + "input_ids").to(at::kLong).reshape({-1}), f.load(p + "loss_mask").reshape({-1}).ne(0),
            path + " sample " + std::to_string(i));
      }
    } else {
      read_jsonl(path);
    }
    if (samples_.empty()) throw std::invalid_argument(path + ": no samples (expected input_ids + loss_mask)");
  }
  int64_t size() const override { return int64_t(samples_.size()); }
  Sample get(int64_t i) const override { return samples_.at(size_t(i)); }
  bool has_features() const override { return false; }
  std::string describe() const override { return path_ + " (tokens, " + std::to_string(samples_.size()) + " samples)"; }

 private:
  void add(at::Tensor ids, at::Tensor mask, const std::string& where) {
    if (ids.numel() != mask.numel())
      throw std::invalid_argument(where + ": input_ids and loss_mask differ in length (" + std::to_string(ids.numel()) +
                                  " vs " + std::to_string(mask.numel()) + ")");
    if (ids.numel() < 2) throw std::invalid_argument(where + ": a sample needs at least 2 tokens");
    samples_.push_back(Sample{ids, mask, {}, {}});
  }
  void read_jsonl(const std::string& path) {
    // A training file must be complete: a broken last line is an error here, not skipped.
    for (const auto& r : read_token_records(path, -1, /*skip_partial_last_line=*/false))
      add(at::tensor(r.ids, at::kLong), at::tensor(r.mask, at::kLong).ne(0), r.where);
  }
  std::string path_;
  std::vector<Sample> samples_;
};

}  // namespace

std::unique_ptr<SampleSource> open_token_samples(const std::string& path) { return std::make_unique<TokenSamples>(path); }

}  // namespace dflash::data
