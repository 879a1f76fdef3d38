// `dflash eval` as a function (the command parses its flags into EvalOptions and calls run_eval): speculative
// decoding of held-out prompts with the target and a drafter (or a test proposer), against the target alone in the
// same run: tau, acceptance histogram, per-slot acceptance, tokens/s, speedup and (at temperature 0) the lossless
// check, per dataset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention_backend.h"
#include "target_options.h"

namespace dflash::eval {

struct EvalDataset {
  std::string name, path;  // path: prompt JSONL (.gz ok)
};

struct EvalOptions {
  models::TargetOptions target;
  std::string proposer = "dflash";     // dflash (needs `drafter`) | oracle | random
  std::string drafter;                 // an exported drafter folder (any family), or a run directory
  std::string drafter_device = "target";  // target (the target's first device) | cpu | cuda:N
  std::string drafter_family;          // --drafter-family as given ("": the drafter config's)
  ops::AttentionBackend attention_backend = ops::AttentionBackend::Auto;
  int64_t block_size = 16;             // of the oracle / random proposers
  int64_t max_draft = 0;               // verify only the first K proposals of each block (0: all)
  double confidence_threshold = 0;     // cut drafts where the cumulative confidence product < X (0: off; a family
                                       // with a confidence cut only, Family::has_confidence_cut)
  std::vector<EvalDataset> datasets;
  int64_t limit = -1;                  // the first N prompts of each dataset (-1: all)
  int64_t max_new = 256;
  double temperature = 0;              // 0: greedy, the lossless check on
  uint64_t seed = 0;
  int64_t repeats = 1;                 // every prompt N times (different random streams)
  bool baseline = true;                // also decode with the target alone (speed baseline, lossless check)
  std::string json;                    // "" or a file for the results
  std::string tokens_out;              // "" or a JSONL file of the generated tokens per prompt and repeat
  // --engine: which engines decode the prompts, side by side: "dflash" (ours) and/or "llama.cpp" (llama_cpp_eval.h:
  // the target GGUF with the drafter folder's draft.gguf)
  std::vector<std::string> engines = {"dflash"};
};

// "NAME=PATH" or "PATH" (named by its file name) items, as --data gives them.
std::vector<EvalDataset> parse_eval_datasets(const std::vector<std::string>& items);

// Prints the table; returns the exit code: 0, or 3 when a greedy decode differed from the target's own.
int run_eval(const EvalOptions& o);

}  // namespace dflash::eval
