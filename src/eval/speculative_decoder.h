// Speculative decoding (docs/DFLASH.md "Inference and tau"): the proposer drafts B-1 tokens after the last
// committed one, the target verifies the block [last, drafts] in one forward on its KV cache, the longest
// agreeing prefix is accepted, the target's own next token is committed after it, and the cache is cropped to
// the committed length. Greedy (temperature 0) accepts a draft iff it equals the target's argmax; sampling accepts a
// (point-mass) draft d with probability p(d) and otherwise draws from p with d removed, and a draft that comes with
// its distribution q (a family's sampled drafts) by rejection_rule.h's min(1, p/q) and residual: either way the
// output is distributed exactly as the target's own sampling.
#pragma once
#include <cstdint>
#include <vector>

#include "proposer.h"
#include "response_generator.h"
#include "target_model.h"

namespace dflash::eval {

struct SpecResult {
  std::vector<int64_t> tokens;            // new tokens (ends with eos when produced), at most max_new
  std::vector<int64_t> accept_lengths;    // per cycle: accepted drafts + 1 (the target's token)
  std::vector<int64_t> slot_reached, slot_accepted;  // per draft slot 1..B-1 (index k-1), B = block size
  double seconds = 0;                     // wall time, prefill included
  // Where the cycles' time went (seconds): the proposer's draft, the target's verify forward, the target's LM
  // head over verified rows, and the proposer's commit of the verified tokens' features.
  double draft_s = 0, verify_s = 0, verify_head_s = 0, commit_s = 0;
};

// max_draft > 0 verifies only the first max_draft proposals of each block (fewer target tokens per cycle:
// cheaper on CPU when the drafter rarely gets far); 0 verifies all B-1.
SpecResult speculative_generate(const models::TargetModel& target, Proposer& proposer,
                                const std::vector<int64_t>& prompt, const data::GenerationOptions& opt,
                                uint64_t stream, int64_t max_draft = 0);

}  // namespace dflash::eval
