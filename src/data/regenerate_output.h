// What `dflash data regenerate` writes, and how a rerun picks up where a crash left it, as classes the C++
// tests reach (the command in regenerate_command.cpp only wires flags to them):
//  - PromptQueue hands out the prompts still to do: not already in the samples JSONL (resume), not an
//    evaluation prompt (held-out texts).
//  - OrderedSampleWriter is the reorder buffer: replies finish out of order under continuous batching, lines
//    are written in prompt order, so the file does not depend on --batch and a resume sees the same order.
//    Replies still buffered when the process dies are simply redone.
//  - repair_missing_features() recomputes the features of samples the JSONL holds but the feature folder lost
//    (a crash before their shard was written, or a JSONL regenerated without --hidden-out).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hidden_shard_writer.h"
#include "prompt_sources.h"
#include "response_generator.h"
#include "sample_store.h"
#include "target_model.h"

namespace dflash::data {

class PromptQueue {
 public:
  // `prompts` in order; `held` = user texts of evaluation prompts (empty: no filter).
  PromptQueue(std::vector<Prompt> prompts, const SampleStore& store, std::set<std::string> held);
  // The next prompt to generate; nullptr when none is left. Held-out prompts are skipped and counted.
  const Prompt* next();
  int64_t size() const { return int64_t(prompts_.size()); }
  int64_t already_done() const { return already_; }  // prompts whose samples the store already holds
  int64_t dropped() const { return dropped_; }       // held-out overlaps skipped so far

 private:
  std::vector<Prompt> prompts_;
  const SampleStore& store_;
  std::set<std::string> held_;
  size_t cursor_ = 0;
  int64_t already_ = 0, dropped_ = 0;
};

class OrderedSampleWriter {
 public:
  // `features` may be null (no --hidden-out). `source` and `split` go into every JSONL line.
  OrderedSampleWriter(SampleStore& store, HiddenShardWriter* features, std::string source, std::string split);
  // A prompt handed to the generator; calls come in prompt order.
  void started(int64_t index, std::vector<int64_t> prompt_ids);
  // Its reply; writes every reply whose predecessors are all written.
  void finished(int64_t index, GenerationResult reply);
  // With --last-hidden: each written sample's final-normed last hidden state [S, H] from its token ids.
  void set_last_hidden(std::function<at::Tensor(const std::vector<int64_t>&)> f) { last_hidden_of_ = std::move(f); }
  // Replies started but not yet written (waiting for an earlier one).
  size_t unwritten() const { return order_.size(); }

 private:
  struct Pending {
    std::vector<int64_t> prompt_ids;
    bool finished = false;
    GenerationResult reply;
  };
  void write(int64_t index, Pending& p);
  SampleStore& store_;
  HiddenShardWriter* features_;
  std::function<at::Tensor(const std::vector<int64_t>&)> last_hidden_of_;
  std::string source_, split_;
  std::map<int64_t, Pending> pending_;  // by prompt index
  std::deque<int64_t> order_;           // indices started, in prompt order
};

// Samples in `jsonl` whose prompt index `features` does not cover get their features from one target forward
// each (as dump-hidden computes them; with last_hidden the final-normed last hidden state too), then are flushed.
// Returns how many were recomputed.
int64_t repair_missing_features(const models::TargetModel& model, const std::string& jsonl,
                                const std::vector<int>& layers, HiddenShardWriter& features, bool last_hidden = false);

}  // namespace dflash::data
