// Training checkpoints: RUN_DIR/checkpoints/step-N.safetensors holds the master weights ("model.<name>"),
// the AdamW moments ("adam_m.<name>", "adam_v.<name>") and a JSON metadata entry "dflash_checkpoint"
// (step, data position, seed, settings). Saving writes a temporary file, fsyncs it, renames it into place,
// then replaces RUN_DIR/checkpoints/latest the same way; older checkpoints beyond `keep` are deleted only
// after that, so a crash at any point leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "atomic_file.h"

namespace dflash::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct TrainState {
  int64_t step = 0;        // optimizer steps done
  int64_t data_pos = 0;    // samples consumed (position in the seeded epoch order)
  NamedTensors master, exp_avg, exp_avg_sq;
  at::Tensor draft_ids;    // [K] int64 target ids of the draft vocabulary (draft_vocab.h); undefined: full vocabulary
  nlohmann::json info;     // free-form: settings, seed, rng notes
};

// Returns the checkpoint path. `before_rename` (tests) runs once the temporary file is complete and before it
// is renamed into place: the moment a crash mid-save would hit.
std::string save_checkpoint(const std::string& run_dir, const TrainState& s, int64_t keep,
                            const std::function<void()>& before_rename = {});

// The newest loadable checkpoint: `latest` first, else step-*.safetensors from the highest step down
// (a damaged file is skipped with a warning on stderr). Throws when none loads.
TrainState load_latest_checkpoint(const std::string& run_dir, std::string* path_out = nullptr);
TrainState load_checkpoint(const std::string& path);
bool has_checkpoint(const std::string& run_dir);

using data::fsync_dir;          // atomic_file.h
using data::write_file_atomic;

}  // namespace dflash::train
