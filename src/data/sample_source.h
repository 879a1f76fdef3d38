// Training samples as the trainer consumes them, whatever the file format. A source is read by one thread
// (the producer); get(i) loads sample i on demand (CPU tensors).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "sample_format.h"

namespace dflash::data {

struct Sample {
  at::Tensor input_ids;    // [S] int64
  at::Tensor loss_mask;    // [S] bool
  at::Tensor features;     // [S, n*H] target layers concatenated (offline formats); undefined for tokens
  at::Tensor last_hidden;  // [S, H] the target's final-normed last hidden state; may be undefined
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t i) const = 0;
  virtual bool has_features() const = 0;  // false: online (the trainer runs the target)
  virtual std::string describe() const = 0;
  // What the features were computed with, when the files record it (empty / 0: unknown).
  virtual std::vector<int64_t> target_layer_ids() const { return {}; }
  virtual int64_t target_num_layers() const { return 0; }
  virtual int64_t skipped() const { return 0; }  // invalid samples left out so far (warned on stderr)
};

// `format` (sample_format.h; docs/TRAINING.md "Data formats"). Auto: *.jsonl -> tokens; a safetensors file or
// folder whose metadata says dflash-hidden-v1 -> dflash, other safetensors -> tokens; *.pt / *.ckpt / *.gz files
// (or a folder of them) -> specforge.
std::unique_ptr<SampleSource> open_samples(const std::string& path, SampleFormat format);

// Token samples (online mode): JSONL lines {"input_ids": [...], "loss_mask": [...]} (other keys ignored)
// or safetensors with {i}.input_ids / {i}.loss_mask.
std::unique_ptr<SampleSource> open_token_samples(const std::string& path);

}  // namespace dflash::data
