// `dflash data regenerate` as a function (the command parses its flags into RegenerateOptions and calls
// run_regenerate): the target writes its own replies to prompts; each sample is the chat-formatted prompt plus the
// reply as input_ids, with loss_mask = 1 on the reply only. Output is resumable JSONL (sample_store.h) with a
// sidecar <output>.meta.json that pins the settings a resume must share. With hidden_out the target's layer outputs
// of each sample are kept from the same pass (hidden_shard_writer.h). Several replicas in the target's layout
// decode side by side, each its own continuous batch over the prompts k, k + R, ... of the ones to do (k its
// index); replies are still written in prompt order (OrderedSampleWriter).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "target_options.h"

namespace dflash::data {

struct RegenerateOptions {
  models::TargetOptions target;
  std::string input, output;               // prompts JSONL(.gz); samples JSONL (appended to)
  std::string split = "train";             // train (refuses evaluation sets) | eval
  std::optional<std::string> held_out_dir; // evaluation sets never trained on; unset: the input's folder, "": none
  int64_t limit = -1;                      // the first N prompts (-1: all)
  int64_t shards = 1, shard = 0;           // this process writes the prompts with index % shards == shard
  int64_t max_new = 256;
  double temperature = 0;                  // 0: greedy
  uint64_t seed = 0;
  int64_t batch = 16;                      // replies decoded together (continuous batching)
  bool onednn = true;                      // with batch > 1: oneDNN batched matmuls on a second weight copy
  std::string hidden_out;                  // "" or a folder of dflash-hidden-v1 features from the same pass
  std::string target_layer_ids;            // with hidden_out: the flag's text ("" = the default for drafter_layers)
  int64_t drafter_layers = 1;
  int64_t hidden_samples_per_shard = 100;
  // with hidden_out: also the final-normed last hidden state of every position (DSpark's L1 teacher, kl_weight's),
  // from one more forward of each finished sample (the batched decode does not return it)
  bool last_hidden = false;
};

// Checks the options, then regenerates what is missing; prints progress and a summary.
void run_regenerate(const RegenerateOptions& o);

}  // namespace dflash::data
