// Proposers with known acceptance, for tests of the speculative decoder: the oracle proposes the target's
// own reference continuation (tau = B under greedy), the random one uniform tokens (tau ~ 1).
#pragma once
#include <random>

#include "proposer.h"

namespace dflash::eval {

class OracleProposer : public Proposer {
 public:
  explicit OracleProposer(int64_t block_size) : B_(block_size) {}
  int64_t block_size() const override { return B_; }
  void set_reference(const std::vector<int64_t>& seq) override { ref_ = seq; }
  void start(const std::vector<int64_t>&, const models::TargetOutput&) override {}
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;
  void commit(const models::TargetOutput&, int64_t) override {}

 private:
  int64_t B_;
  std::vector<int64_t> ref_;
};

class RandomProposer : public Proposer {
 public:
  RandomProposer(int64_t block_size, int64_t vocab, uint64_t seed) : B_(block_size), V_(vocab), rng_(seed) {}
  int64_t block_size() const override { return B_; }
  void start(const std::vector<int64_t>&, const models::TargetOutput&) override {}
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;
  void commit(const models::TargetOutput&, int64_t) override {}

 private:
  int64_t B_, V_;
  std::mt19937_64 rng_;
};

}  // namespace dflash::eval
