// Offline training data: target hidden states computed beforehand.
//
// Format `dflash-hidden-v1` (our own; `dflash data dump-hidden` writes it, tests write it from Python):
//   a folder of *.safetensors shards read in file-name order, or a single file. Each shard's metadata holds
//   "format": "dflash-hidden-v1", "target_layer_ids": "1,9,17" (comma list), "hidden_size": "576";
//   for sample i = 0..n-1 of the shard:
//     "{i}.input_ids"     int64 (any int) [S]
//     "{i}.loss_mask"     bool/uint8/int  [S]  (1 = assistant token, in the loss)
//     "{i}.hidden_states" any float [S, n*H]: outputs of target layers target_layer_ids (HF hidden_states[id+1])
//                         concatenated on the last axis in that order
//     "{i}.last_hidden"   any float [S, H] (optional): the target's final-normed last hidden state
//   Samples are numbered shard by shard in file-name order.
//
// SpecForge offline samples: one `torch.save` dict per file (*.ckpt, *.pt; *.gz is gunzipped first) with
//   input_ids [S] or [1,S], loss_mask [S] or [1,S], hidden_states [1,S,n*H] (optional last_hidden_states
//   [1,S,H]); SpecForge's EAGLE-3 names are accepted too: aux_hidden_state [1,S,n*H] (the concatenated
//   target layers) and hidden_state [1,S,H] (the final-normed last layer). Other keys are ignored. Read with LibTorch's pickle loader (torch::jit::pickle_load: no TorchScript compilation).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sample_source.h"

namespace dflash::train {

inline constexpr const char* kDflashHiddenFormat = "dflash-hidden-v1";

std::unique_ptr<SampleSource> open_dflash_hidden(const std::string& path);
std::unique_ptr<SampleSource> open_specforge(const std::string& path);
// True when `path` (a safetensors file, or the first one in a folder) carries dflash-hidden-v1 metadata.
bool is_dflash_hidden(const std::string& path);

// Metadata of a dflash-hidden-v1 source (target_layer_ids and hidden_size of its first shard).
struct HiddenMeta {
  std::vector<int64_t> target_layer_ids;
  int64_t hidden_size = 0;
};
HiddenMeta dflash_hidden_meta(const std::string& path);

// Writes one shard (used by tests and by tools that dump hidden states).
void write_dflash_shard(const std::string& path, const std::vector<Sample>& samples,
                        const std::vector<int64_t>& target_layer_ids, int64_t hidden_size);

}  // namespace dflash::train
