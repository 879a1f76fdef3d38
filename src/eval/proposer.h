// What speculative decoding asks of a drafter: given the last committed token, propose the next B-1 tokens;
// then hear which of them the target verified. The DFlash drafter is one implementation (dflash_proposer.h);
// tests use an oracle (the target's own continuation) and a random proposer (simple_proposers.h).
#pragma once
#include <cstdint>
#include <vector>

#include "target_model.h"

namespace dflash::eval {

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual int64_t block_size() const = 0;
  // Target layers whose outputs the proposer reads (captured during prefill and verification).
  virtual std::vector<int> target_layers() const { return {}; }
  // Some proposers (the oracle) are told the reference continuation of the prompt before it starts.
  virtual void set_reference(const std::vector<int64_t>& /*full_sequence*/) {}
  // A new sequence: `prefill` is the target's forward over the whole prompt.
  virtual void start(const std::vector<int64_t>& prompt, const models::TargetOutput& prefill) = 0;
  // Proposals for positions pos+1 .. pos+B-1, where `last_token` is the committed token at position pos.
  virtual std::vector<int64_t> propose(int64_t last_token, int64_t pos) = 0;
  // The first n tokens of the last verified block (positions pos .. pos+n-1) are now committed; `verify`
  // is the target's forward over that block.
  virtual void commit(const models::TargetOutput& verify, int64_t n) = 0;
};

}  // namespace dflash::eval
