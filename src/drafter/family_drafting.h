// Drafting one speculative cycle, the family's part (docs/EVAL.md): eval runs the drafter's block
// [last, MASK x (B-1)] through the backbone once (its context cache) and hands the final-normed hidden states to
// the family, which turns them into drafts: DSpark's Markov-corrected slots and confidence cut, DFlash2's selector
// walk. A family without these hooks (FamilyModel::drafting() nullptr) drafts as DFlash does: the argmax of the LM
// head on slots 1..B-1, which eval does itself. What eval owns and a family must not include (the target model's
// dtype and devices, the decode's sampler: data/token_sampler.h, a layer above) comes in as callbacks.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "drafter_config.h"
#include "drafter_weights.h"

namespace dflash::drafter {

// One cycle's block as the drafter computed it.
struct DraftBlock {
  at::Tensor hidden;       // [B, H]: final-normed hidden states of [last, MASK x (B-1)], float32, drafter's device
  int64_t last_token = 0;  // slot 0's token: the last committed one
  // How many drafts the cycle makes: Family::drafts_per_cycle, or eval's --max-draft when smaller.
  int64_t drafts = 0;
  // The target's LM head on hidden states [1, n, H] (any dtype and device): logits [1, n, V] in the target's dtype,
  // on its output device.
  std::function<at::Tensor(const at::Tensor&)> lm_head;
};

// The decode's sampler. temperature <= 0: greedy (argmax), none of the callbacks is called.
struct DraftSampling {
  double temperature = 0;
  std::function<double()> uniform;  // a uniform in [0, 1) from the decode's random stream
  // softmax(logits_row / temperature) in float64, dense over the row [V] (the distribution the draft goes with into
  // the rejection rule), and an index drawn from such a distribution with the decode's stream.
  std::function<std::vector<double>(const at::Tensor& logits_row)> probs;
  std::function<int64_t(const std::vector<double>& probs)> draw;
};

// One cycle's drafts: at most DraftBlock::drafts tokens (fewer: the family stopped early, DSpark's confidence cut);
// `probs` empty: point masses (greedy), else probs[j] is the dense distribution [V] draft j was drawn from.
struct BlockDraft {
  std::vector<int64_t> tokens;
  std::vector<std::vector<double>> probs;
};

struct DraftingOptions {
  double confidence_threshold = 0;  // > 0: the cumulative confidence cut (Family::has_confidence_cut)
};

// A loaded drafter's drafting: the family's weights for it prepared once (float32 on the drafter's device).
class BlockDrafter {
 public:
  virtual ~BlockDrafter() = default;
  virtual BlockDraft draft(const DraftBlock& block, const DraftSampling& sampling) const = 0;
};

class FamilyDrafting {
 public:
  virtual ~FamilyDrafting() = default;
  // What the family cannot draft with, from the config alone (eval asks before it loads the target): throws
  // std::invalid_argument "<where>: field ..." (or "eval: ..."); `where` is the drafter's config.json.
  virtual void check(const DrafterConfig& /*c*/, const DraftingOptions& /*o*/, const std::string& /*where*/) const {}
  // The drafting of the drafter (c, w) loaded from `where`, w on the device it runs on; refuses what check() does.
  virtual std::unique_ptr<BlockDrafter> make(const DrafterConfig& c, const DrafterWeights& w, const DraftingOptions& o,
                                             const std::string& where) const = 0;
};

}  // namespace dflash::drafter
