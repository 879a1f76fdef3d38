// The draft-vocabulary mapping of a DFlash drafter (train/draft_vocab.h builds it): draft id d stands for target id
// draft_ids[d], draft_ids ascending. The files carry it the way vLLM's DFlash / EAGLE-3 loaders read it
// (vllm/model_executor/models/qwen3_dflash.py, llama_eagle3.py: `d2t` int64 [K] offsets, target = arange(K) + d2t;
// `t2d` bool [V] as SpecForge writes it, which vLLM skips).
#pragma once
#include <string>

#include <ATen/core/Tensor.h>

namespace dflash::drafter {

// vLLM's d2t: int64 [K] offsets, target_id = draft_id + d2t[draft_id].
at::Tensor draft_to_target_offsets(const at::Tensor& draft_ids);
// t2d: bool [vocab], true at the target ids that have a draft id.
at::Tensor target_in_draft_mask(const at::Tensor& draft_ids, int64_t vocab);
// int64 [vocab]: the draft id of each target id, -1 where there is none.
at::Tensor target_to_draft_table(const at::Tensor& draft_ids, int64_t vocab);
// The draft ids back from d2t (and t2d when defined), checked: ids in [0, vocab), strictly ascending, t2d
// true exactly there. `where` names the file in errors.
at::Tensor draft_ids_from_offsets(const at::Tensor& d2t, const at::Tensor& t2d, int64_t vocab, const std::string& where);

// Hard labels (target ids) -> draft ids through `table` (target_to_draft_table): labels outside the draft
// vocabulary get weight 0 and label 0. Returns {labels, weights, out_of_vocab}: out_of_vocab [rows] bool marks
// rows that had weight > 0 and lost it.
struct RestrictedLabels {
  at::Tensor labels, weights, out_of_vocab;
};
RestrictedLabels restrict_labels(const at::Tensor& labels, const at::Tensor& weights, const at::Tensor& table);

}  // namespace dflash::drafter
