// The target writes its own reply to a prompt: prefill, then one token per forward on the KV cache until an
// end-of-sequence id or max_new tokens. Greedy or sampled (seeded per prompt, so reruns reproduce).
#pragma once
#include <cstdint>
#include <vector>

#include "target_model.h"

namespace dflash::data {

struct GenerationOptions {
  int64_t max_new = 256;
  double temperature = 0;  // 0: greedy
  uint64_t seed = 0;
  std::vector<int64_t> eos_ids;
  // generate_batched only: target layers whose outputs are kept for every position (prompt and reply), for
  // the drafter's offline features; stored in feature_dtype on the CPU.
  std::vector<int> capture_layers;
  at::ScalarType feature_dtype = at::kBFloat16;
};

struct GenerationResult {
  std::vector<int64_t> tokens;  // new tokens, ending with the eos id when one was produced
  bool hit_eos = false;
  double prefill_seconds = 0, decode_seconds = 0;
  // With capture_layers: [prompt + reply tokens, layers x hidden], the captured layers concatenated in the
  // order given (as dump-hidden stores them); undefined otherwise.
  at::Tensor features;
};

// `stream` separates the random draws of different prompts (use the prompt index).
GenerationResult generate_response(const models::TargetModel& model, const std::vector<int64_t>& prompt,
                                   const GenerationOptions& opt, uint64_t stream);

}  // namespace dflash::data
