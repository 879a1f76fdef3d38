// Continuous batching for the target's own replies: up to `slots` replies in flight; a prompt is prefilled
// alone as soon as a slot frees (its reply hit an end-of-sequence id or max_new tokens), and every decode step
// advances all in-flight replies by one token in one batched target call (TargetModel::decode_batch).
// Replies finish out of order. Each prompt draws from its own stream (make_rng(seed, stream), the same as
// generate_response), so a reply does not depend on which other prompts share its batch, up to the float
// rounding of the batched matmuls (which depends on the number of rows).
// With opt.capture_layers the target's layer outputs are kept for every token it reads, so one pass yields both
// the reply and the drafter's training features; a finished reply's last token then takes one more batched
// step (its logits unused) before it is handed back, since no other step reads it.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "response_generator.h"
#include "target_model.h"

namespace dflash::data {

struct BatchPrompt {
  int64_t id = 0;                 // the caller's key, handed back with the reply
  std::vector<int64_t> tokens;    // non-empty
  uint64_t stream = 0;            // random stream (use the prompt index, as generate_response's callers do)
};

struct BatchStats {
  int64_t prompts = 0, prefill_tokens = 0, new_tokens = 0;
  int64_t decode_steps = 0, decode_tokens = 0;  // tokens made by batched decode steps (not by prefills)
  int64_t feature_rows = 0;                      // rows that only read a finished reply's last token
  double prefill_seconds = 0, decode_seconds = 0;
};

// Fills `next` with the next prompt; false when there are none left.
using NextPrompt = std::function<bool(BatchPrompt& next)>;
// Called once per prompt as its reply finishes. result.prefill_seconds is its own prefill; decode_seconds the
// wall time of the batched steps it took part in (shared with the other rows).
using ReplyDone = std::function<void(int64_t id, GenerationResult&& result)>;

BatchStats generate_batched(const models::TargetModel& model, const GenerationOptions& opt, int64_t slots,
                            const NextPrompt& next, const ReplyDone& done);

}  // namespace dflash::data
