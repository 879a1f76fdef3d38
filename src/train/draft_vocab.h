// A draft vocabulary (`draft_vocab` K > 0): the drafter predicts only K target tokens, the most frequent ones of
// the training answers plus the specials that must stay (the target's EOS ids), through a [K, H] slice of the
// target's LM head. Draft id d stands for target id draft_ids[d]; draft_ids ascends, so the vLLM/EAGLE-3
// offsets d2t[d] = draft_ids[d] - d are >= 0 and non-decreasing, and t2d[t] says whether t has a draft id.
// Targets outside the vocabulary are masked out of the loss and counted (step_runner.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "draft_vocab_map.h"
#include "sample_source.h"

namespace dflash::train {

using drafter::draft_ids_from_offsets;
using drafter::draft_to_target_offsets;
using drafter::restrict_labels;
using drafter::RestrictedLabels;
using drafter::target_in_draft_mask;
using drafter::target_to_draft_table;

// How often each target token occurs at loss-masked positions (the answers) of the first max_len tokens of
// every sample: the labels training sees. [vocab] int64; a token id outside [0, vocab) is an error naming it.
std::vector<int64_t> count_answer_tokens(const data::SampleSource& samples, int64_t vocab, int64_t max_len);

// The K target ids of the draft vocabulary, ascending [K] int64: every id of `keep` (in range, deduplicated),
// then the most frequent tokens (count descending, ties: the lower id first), then, when fewer than K tokens
// occur, the lowest ids that did not occur. K must be in [|keep|, vocab].
at::Tensor select_draft_vocab(const std::vector<int64_t>& counts, int64_t k, const std::vector<int64_t>& keep);

// RUN_DIR/draft_vocab.safetensors: draft_ids [K] int64, counts [vocab] int64 (of the data it was built from) and
// lm_head [K, H] (the target's rows, for `dflash export`). Written atomically by the lead.
struct DraftVocabFile {
  at::Tensor draft_ids, counts, lm_head;
};
std::string draft_vocab_path(const std::string& run_dir);
void save_draft_vocab(const std::string& run_dir, const DraftVocabFile& f);
DraftVocabFile load_draft_vocab(const std::string& run_dir);

}  // namespace dflash::train
