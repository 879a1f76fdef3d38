#include "regenerate_output.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <utility>

#include "held_out.h"
#include "hidden_features.h"
#include "progress.h"
#include "token_records.h"

namespace dflash::data {

PromptQueue::PromptQueue(std::vector<Prompt> prompts, const SampleStore& store, std::set<std::string> held)
    : prompts_(std::move(prompts)), store_(store), held_(std::move(held)) {
  for (const auto& p : prompts_) already_ += store_.has(p.index) ? 1 : 0;
}

const Prompt* PromptQueue::next() {
  while (cursor_ < prompts_.size()) {
    const Prompt& p = prompts_[cursor_++];
    if (store_.has(p.index)) continue;
    if (!held_.empty() && held_.count(prompt_user_text(p))) {
      ++dropped_;
      continue;
    }
    return &p;
  }
  return nullptr;
}

OrderedSampleWriter::OrderedSampleWriter(SampleStore& store, HiddenShardWriter* features, std::string source,
                                         std::string split)
    : store_(store), features_(features), source_(std::move(source)), split_(std::move(split)) {}

void OrderedSampleWriter::started(int64_t index, std::vector<int64_t> prompt_ids) {
  if (pending_.count(index)) throw std::logic_error("regenerate: prompt " + std::to_string(index) + " started twice");
  pending_[index].prompt_ids = std::move(prompt_ids);
  order_.push_back(index);
}

void OrderedSampleWriter::finished(int64_t index, GenerationResult reply) {
  const auto it = pending_.find(index);
  if (it == pending_.end()) throw std::logic_error("regenerate: reply to prompt " + std::to_string(index) + " never started");
  it->second.reply = std::move(reply);
  it->second.finished = true;
  while (!order_.empty() && pending_.at(order_.front()).finished) {
    const int64_t first = order_.front();
    order_.pop_front();
    write(first, pending_.at(first));
    pending_.erase(first);
  }
}

void OrderedSampleWriter::write(int64_t index, Pending& p) {
  std::vector<int64_t> ids = std::move(p.prompt_ids);
  const GenerationResult& r = p.reply;
  const int64_t prompt_len = int64_t(ids.size());
  ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
  std::vector<int> mask(ids.size(), 0);
  std::fill(mask.begin() + prompt_len, mask.end(), 1);
  store_.append({{"index", index},
                 {"source", source_},
                 {"split", split_},
                 {"input_ids", ids},
                 {"loss_mask", mask},
                 {"prompt_tokens", prompt_len},
                 {"response_tokens", r.tokens.size()},
                 {"finish", r.hit_eos ? "eos" : "length"}});
  // A folder taken over with fewer JSONL lines than features (copied without its JSONL) already holds this one.
  if (!features_ || features_->covered().count(index)) return;
  if (!r.features.defined() || r.features.size(0) != int64_t(ids.size()))
    throw std::logic_error("regenerate: features of " +
                           std::to_string(r.features.defined() ? r.features.size(0) : 0) +
                           " positions for a sample of " + std::to_string(ids.size()));
  HiddenSample h;
  h.input_ids = at::tensor(ids, at::kLong);
  h.loss_mask = at::tensor(std::vector<int64_t>(mask.begin(), mask.end()), at::kLong).ne(0);
  h.hidden_states = r.features;
  if (last_hidden_of_) h.last_hidden = last_hidden_of_(ids);
  features_->add(index, std::move(h));
}

int64_t repair_missing_features(const models::TargetModel& model, const std::string& jsonl,
                                const std::vector<int>& layers, HiddenShardWriter& features, bool last_hidden) {
  std::vector<TokenRecord> missing;
  for (auto& r : read_token_records(jsonl, -1, /*skip_partial_last_line=*/true))
    if (r.index >= 0 && !features.covered().count(r.index)) missing.push_back(std::move(r));
  if (missing.empty()) return 0;
  Progress bar("features of samples already written", int64_t(missing.size()), 0, "samples");
  int64_t n = 0, tokens = 0;
  for (const auto& r : missing) {
    HiddenSample h;
    h.input_ids = at::tensor(r.ids, at::kLong);
    h.loss_mask = at::tensor(r.mask, at::kLong).ne(0);
    at::Tensor last;
    h.hidden_states = sample_features(model, r.ids, layers, last_hidden ? &last : nullptr);
    if (last_hidden) h.last_hidden = last;
    features.add(r.index, std::move(h));
    bar.update(++n, tokens += int64_t(r.ids.size()));
  }
  features.flush();
  bar.finish();
  return n;
}

}  // namespace dflash::data
