// The real drafter as a Proposer: context features (the target's hidden states at target_layer_ids for every
// committed token) go into a DrafterContextCache; each cycle the block [last, MASK x (B-1)] runs once and the
// proposals are the argmax of the target's LM head on slots 1..B-1 (or of the drafter's own draft-vocabulary
// head, mapped to target ids).
#pragma once
#include <memory>

#include <c10/core/Device.h>
#include <string>

#include "drafter_config.h"
#include "drafter_context_cache.h"
#include "drafter_weights.h"
#include "proposer.h"

namespace dflash::eval {

// An exported DFlash folder (config.json + model.safetensors), or a run directory holding one (see
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

class DFlashProposer : public Proposer {
 public:
  // max_draft > 0: only slots 1..max_draft go through the LM head (the rest are never verified; on CPU the
  // LM head over 15 rows costs more than a whole target decode step). attention: Fused or Reference.
  DFlashProposer(const LoadedDrafter& d, const models::TargetModel& target, int64_t max_draft = 0,
                 ops::AttentionBackend attention = ops::AttentionBackend::Fused);
  int64_t block_size() const override { return d_.config.block_size; }
  std::vector<int> target_layers() const override;
  void start(const std::vector<int64_t>& prompt, const models::TargetOutput& prefill) override;
  std::vector<int64_t> propose(int64_t last_token, int64_t pos) override;
  void commit(const models::TargetOutput& verify, int64_t n) override;

 protected:
  // Final-normed hidden states [1, B, H] of the block [last_token, MASK x (B-1)] anchored at pos.
  at::Tensor block_hidden(int64_t last_token, int64_t pos);
  int64_t max_draft() const { return max_draft_; }

  at::Tensor features(const models::TargetOutput& out, int64_t n) const;
  const LoadedDrafter& d_;
  const models::TargetModel& target_;

 private:
  DrafterContextCache cache_;
  int64_t max_draft_ = 0;
};

}  // namespace dflash::eval
