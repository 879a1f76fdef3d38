// set_up_draft_vocab (target_setup.h): the draft vocabulary of a run, built before the first step.
#include <cstdio>
#include <stdexcept>

#include <ATen/ATen.h>

#include "draft_vocab.h"
#include "serving_engines.h"
#include "target_loader.h"
#include "target_setup.h"

namespace dflash::train {
namespace {

// The target's EOS ids: the drafter must be able to propose the end of an answer even where the data truncated
// it. The mask token is not kept: it only enters through the (full) embedding and is never a label.
std::vector<int64_t> eos_ids(const TrainConfig& cfg, const TargetSide& side) {
  if (side.target) return side.target->config().eos_token_ids;
  try {  // offline data with a drafter config: the target's config.json may still name them
    return models::read_target_config(cfg.target).eos_token_ids;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: draft_vocab: no EOS ids kept (cannot read the target's config: %s)\n", e.what());
    return {};
  }
}

}  // namespace

void set_up_draft_vocab(const TrainConfig& cfg, const RunContext& run, TargetSide& side) {
  const int64_t vocab = side.frozen.lm_head.size(0);
  const at::Tensor resumed = run.resume ? run.resume->draft_ids : at::Tensor();
  if (cfg.draft_vocab == 0) {
    if (resumed.defined())
      throw std::invalid_argument("train config: 'draft_vocab' is 0 but the checkpoint to resume was trained with a "
                                  "draft vocabulary of " + std::to_string(resumed.size(0)) + " tokens");
    return;
  }
  if (cfg.draft_vocab > vocab)
    throw std::invalid_argument("train config: 'draft_vocab' must be in [1, " + std::to_string(vocab) +
                                "] (the target's vocabulary size), got " + std::to_string(cfg.draft_vocab));
  at::Tensor ids;
  at::Tensor counts;
  if (resumed.defined()) {  // the mapping the weights were trained with, whatever the data says now
    if (resumed.size(0) != cfg.draft_vocab)
      throw std::invalid_argument("train config: 'draft_vocab' is " + std::to_string(cfg.draft_vocab) +
                                  " but the checkpoint to resume has a draft vocabulary of " +
                                  std::to_string(resumed.size(0)) + " tokens");
    ids = draft_ids_from_offsets(draft_to_target_offsets(resumed), at::Tensor(), vocab, "checkpoint draft_vocab");
    counts = at::zeros({vocab}, at::kLong);
  } else {
    const std::vector<int64_t> c = count_answer_tokens(*side.samples, vocab, cfg.max_len);
    ids = select_draft_vocab(c, cfg.draft_vocab, eos_ids(cfg, side));
    counts = at::tensor(c, at::kLong);
    const double total = double(counts.sum().item<int64_t>());
    const double covered = double(counts.index_select(0, ids).sum().item<int64_t>());
    if (run.lead)
      std::fprintf(stderr, "draft vocabulary: %lld of %lld target tokens cover %.2f%% of the %.0f answer tokens\n",
                   (long long)cfg.draft_vocab, (long long)vocab, total > 0 ? 100.0 * covered / total : 100.0, total);
  }
  if (ids.size(0) == vocab) return;  // every token: the full vocabulary, nothing to restrict
  side.draft_ids = ids;
  side.frozen.lm_head = side.frozen.lm_head.index_select(0, ids).contiguous();  // [K, H]: rows copied once
  side.dcfg.draft_vocab_size = ids.size(0);
  if (run.lead) {  // said before training: only some engines serve a draft head (docs/SERVING.md)
    drafter::ExportTraits traits;
    traits.draft_vocab = true;
    std::vector<std::string> others;
    for (const auto& e : drafter::engine_names())
      if (!drafter::engine_refusal(traits, e).empty()) others.push_back(e);
    std::fprintf(stderr, "draft vocabulary: served by %s only (dflash export --engine vllm); %s would draft "
                 "differently (docs/SERVING.md)\n", drafter::join_engines(drafter::engines_serving(traits)).c_str(),
                 drafter::join_engines(others).c_str());
  }
  if (!resumed.defined()) {  // written with the run's other files once every check has passed (trainer.cpp)
    side.draft_counts = counts;
    side.draft_lm_head = side.frozen.lm_head;
  }
}

}  // namespace dflash::train
