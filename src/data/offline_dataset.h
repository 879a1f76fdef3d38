// Offline training data: target hidden states computed beforehand.
//
// Format `dflash-hidden-v1`: see src/data/hidden_shards.h (format, validation, skipped samples).
//
// SpecForge offline samples: one `torch.save` dict per file (*.ckpt, *.pt; *.gz is gunzipped first) with
//   input_ids [S] or [1,S], loss_mask [S] or [1,S], hidden_states [1,S,n*H] (optional last_hidden_states
//   [1,S,H]); SpecForge's EAGLE-3 names are accepted too: aux_hidden_state [1,S,n*H] (the concatenated
//   target layers) and hidden_state [1,S,H] (the final-normed last layer). Other keys are ignored. Read with LibTorch's pickle loader (torch::jit::pickle_load: no TorchScript compilation).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hidden_shards.h"
#include "sample_source.h"

namespace dflash::data {

// A sample whose values hold NaN/Inf is replaced by the next valid one (deterministic, so resumes match) and
// counted in skipped(); samples with wrong shapes or dtypes are left out on open.
std::unique_ptr<SampleSource> open_dflash_hidden(const std::string& path);
std::unique_ptr<SampleSource> open_specforge(const std::string& path);

}  // namespace dflash::data
