// A loaded drafter as a Proposer, whatever its family: context features (the target's hidden states at
// target_layer_ids for every committed token) go into a DrafterContextCache; each cycle the block
// [last, MASK x (B-1)] runs once, and its final-normed hidden states become the cycle's drafts through the family's
// drafting hook (drafter/family_drafting.h: each family's own, in its folder under src/families/), or, for a
// family without one (the default family, the test-only toy family), as the argmax of the target's LM head on slots 1..B-1 (or
// of the drafter's own draft-vocabulary head, mapped to target ids).
#pragma once
#include <memory>

#include <c10/core/Device.h>
#include <string>

#include "attention_backend.h"
#include "drafter_config.h"
#include "drafter_context_cache.h"
#include "drafter_weights.h"
#include "family_drafting.h"
#include "proposer.h"

namespace dflash::eval {

// An exported drafter folder (config.json + model.safetensors), or a run directory holding one (see
// resolve_drafter_dir).
struct LoadedDrafter {
  std::string dir;
  drafter::DrafterConfig config;
  drafter::DrafterWeights weights;
  // A draft vocabulary (config.draft_vocab_size > 0): the drafter's own LM head [K, H] and the target id of each
  // draft id [K] (from the file's d2t offsets); proposals are mapped to target ids before verification.
  at::Tensor lm_head, draft_ids;
};
std::string resolve_drafter_dir(const std::string& path);
// Weights in float32 on `device`, where the proposer then runs the drafter.
LoadedDrafter load_drafter(const std::string& path, const at::Device& device = at::kCPU);

struct DrafterProposerOptions {
  // > 0: only the first max_draft drafts of a cycle (the rest are never verified; on CPU the LM head over 15 rows
  // costs more than a whole target decode step).
  int64_t max_draft = 0;
  ops::AttentionBackend attention = ops::AttentionBackend::Fused;
  double confidence_threshold = 0;  // > 0: the cumulative confidence cut of a family that has one
};

class DrafterProposer : public Proposer {
 public:
  DrafterProposer(const LoadedDrafter& d, const models::TargetModel& target, const DrafterProposerOptions& o = {});
  // The last committed token plus the family's drafts_per_cycle (Family::drafts_per_cycle: B - 1 by default).
  int64_t block_size() const override { return drafts_per_cycle_ + 1; }
  std::vector<int> target_layers() const override;
  void start(const std::vector<int64_t>& prompt, const models::TargetOutput& prefill) override;
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;  // greedy drafts
  Draft draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) override;
  void commit(const models::TargetOutput& verify, int64_t n) override;

  // The cycle's drafts with a given sampler (a test tool replays a family's uniforms against a reference walk).
  Draft draft_with(int64_t last_token, int64_t pos, const drafter::DraftSampling& sampling);
  // Final-normed hidden states [B, H] of the block [last_token, MASK x (B-1)] anchored at pos (float32).
  at::Tensor cycle_hidden(int64_t last_token, int64_t pos);

 private:
  at::Tensor features(const models::TargetOutput& out, int64_t n) const;
  // DFlash's drafts (a family without a drafting hook): the LM head's argmax on slots 1..n.
  std::vector<int64_t> plain_drafts(const at::Tensor& hidden, int64_t n) const;

  const LoadedDrafter& d_;
  const models::TargetModel& target_;
  DrafterContextCache cache_;
  int64_t max_draft_ = 0;
  int64_t drafts_per_cycle_ = 0;
  std::unique_ptr<drafter::BlockDrafter> family_;  // nullptr: DFlash's plain block
};

}  // namespace dflash::eval
