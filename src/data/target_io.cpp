#include "target_io.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "prompt_sources.h"

namespace dflash::data {

std::vector<int64_t> stop_ids(const models::TargetModel& model, const tok::Tokenizer* t) {
  std::vector<int64_t> ids = model.config().eos_token_ids;
  if (t && t->eos_id() >= 0 && std::find(ids.begin(), ids.end(), t->eos_id()) == ids.end()) ids.push_back(t->eos_id());
  return ids;
}

std::vector<int64_t> parse_stop_ids(const std::string& spec, const models::TargetModel& model, const tok::Tokenizer* t) {
  if (spec == "config") return stop_ids(model, t);
  std::vector<int64_t> ids;
  if (spec == "none") return ids;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 0 || v >= model.config().vocab_size)
      throw std::invalid_argument("--eos expects 'config', 'none' or comma-separated token ids in [0, " +
                                  std::to_string(model.config().vocab_size) + "); got '" + spec + "'");
    ids.push_back(v);
    pos = end + 1;
  }
  return ids;
}

std::vector<int64_t> prompt_token_ids(const Prompt& p, const tok::Tokenizer* t, const tok::ChatFormat* chat,
                                      const std::string& where) {
  if (!p.prompt_ids.empty()) return p.prompt_ids;
  if (!t || !chat)
    throw std::runtime_error(where + ": text prompts need a tokenizer (--tokenizer, or a GGUF / HF folder with "
                             "tokenizer.json as --model)");
  const auto enc = chat->encode(*t, p.messages, /*add_generation_prompt=*/true);
  return std::vector<int64_t>(enc.ids.begin(), enc.ids.end());
}

std::vector<int64_t> prompt_token_ids(const Prompt& p, const tok::Tokenizer* t, const tok::ChatFormat* chat,
                                      const std::string& where, const models::TargetConfig& target) {
  std::vector<int64_t> ids = prompt_token_ids(p, t, chat, where);
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids[k] < 0 || ids[k] >= target.vocab_size)
      throw std::invalid_argument(where + ": token id " + std::to_string(ids[k]) + " at position " + std::to_string(k) +
                                  " is outside the target's vocabulary [0, " + std::to_string(target.vocab_size) + ")");
  const int64_t ctx = target.max_position_embeddings;
  if (ctx > 0 && int64_t(ids.size()) > ctx)
    throw std::invalid_argument(where + ": the prompt is " + std::to_string(ids.size()) +
                                " tokens, longer than the target's context of " + std::to_string(ctx) +
                                " tokens (max_position_embeddings); shorten it or leave it out");
  return ids;
}

}  // namespace dflash::data
