// The shape of a training step, shared by every command that runs, plans or measures one (`train`, `plan`,
// `bench step`, `doctor --config`): one name, one default, one help and one range per setting, declared here once.
// TrainConfig takes its defaults, help and ranges from this table (train_config.cpp), and the other commands declare
// the same flags from it (declare_run_shape), so a setting cannot be spelt or defaulted two ways. The flag is train's
// key with '-' for '_' (--max-len for max_len). Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "checkpoint_policy.h"
#include "dtype_names.h"
#include "number_range.h"

namespace dflash::drafter {

struct RunShape {
  int64_t max_len = 4096;       // tokens of a sequence (longer ones are truncated): the step's context length
  int64_t num_anchors = 512;    // blocks per sequence
  int64_t block_size = 16;      // B (a drafter config's own when one is given)
  int64_t loss_chunk_rows = 1024;
  double kl_weight = 0.0;       // > 0: soft labels from the target's last hidden state (docs/DFLASH.md)
  util::Dtype dtype = util::Dtype::BF16;
  CheckpointPolicy activation_checkpoint;  // none
};

struct RunShapeField {
  std::string key;         // train's key (max_len); the flag is --max-len
  std::string kind;        // "int", "float" or "str", as train's field table writes it
  std::string value_name;  // the flag's value in help: S, N, B, ROWS, X, DTYPE, POLICY
  std::string help;
  util::NumberRange range;  // numbers: the values a setting may take (integers: whole numbers in it)
  std::string note;         // said after the range in errors
};
// In documentation order.
const std::vector<RunShapeField>& run_shape_fields();
// The field of `key`; std::logic_error for a key that is not in the table.
const RunShapeField& run_shape_field(const std::string& key);
// A setting of `s` as train's config file writes it: "4096", "0.0", "0.15", "bf16", "every:2".
std::string run_shape_text(const RunShape& s, const std::string& key);
// "max_len" -> "max-len".
std::string run_shape_flag(const std::string& key);

// Declares the settings of `keys` on `a` with the table's flag, help, default and range, and makes the old
// spellings of other commands (--seq-len, --anchors, --loss-chunk, --checkpoint) usage errors that name the new one.
void declare_run_shape(util::Args& a, const std::vector<std::string>& keys);
// `base` with each setting of `keys` given on the command line set from it (a bad dtype or checkpoint policy is a
// usage error naming the flag).
RunShape given_run_shape(const util::Args& a, const std::vector<std::string>& keys, RunShape base);

}  // namespace dflash::drafter
