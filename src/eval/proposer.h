// What speculative decoding asks of a drafter: given the last committed token, propose the next B-1 tokens;
// then hear which of them the target verified. A drafter of any family is one implementation (drafter_proposer.h:
// the family's drafting hook turns the block into drafts, e.g. B of them, sampled ones with their
// distributions); tests use an oracle (the target's own continuation) and a random proposer (simple_proposers.h).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "target_model.h"

namespace dflash::eval {

// One cycle's drafts. `probs` empty: the drafts are point masses (greedy or deterministic proposers); otherwise
// probs[j] is the dense distribution [V] draft j was drawn from, which the rejection rule divides by
// (rejection_rule.h). Fewer than block_size() - 1 tokens: the proposer stopped early (a family's confidence cut).
struct Draft {
  std::vector<int64_t> tokens;
  std::vector<std::vector<double>> probs;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Tokens the target verifies per cycle: the last committed one plus at most block_size() - 1 drafts (the
  // drafter's B by default; B + 1 for a family whose B block outputs are all drafts).
  virtual int64_t block_size() const = 0;
  // Target layers whose outputs the proposer reads (captured during prefill and verification).
  virtual std::vector<int> target_layers() const { return {}; }
  // Some proposers (the oracle) are told the reference continuation of the prompt before it starts.
  virtual void set_reference(const std::vector<int64_t>& /*full_sequence*/) {}
  // A new sequence: `prefill` is the target's forward over the whole prompt.
  virtual void start(const std::vector<int64_t>& prompt, const models::TargetOutput& prefill) = 0;
  // Proposals for positions pos+1 .. pos+B-1, where `last_token` is the committed token at position pos.
  virtual std::vector<int64_t> propose(int64_t last_token, int64_t pos) = 0;
  // The cycle's drafts at the decode temperature (rng: the decode's stream, for proposers that sample). The
  // default wraps propose(): point masses.
  virtual Draft draft(int64_t last_token, int64_t pos, double /*temperature*/, std::mt19937_64& /*rng*/) {
    return {propose(last_token, pos), {}};
  }
  // The first n tokens of the last verified block (positions pos .. pos+n-1) are now committed; `verify`
  // is the target's forward over that block.
  virtual void commit(const models::TargetOutput& verify, int64_t n) = 0;
};

}  // namespace dflash::eval
