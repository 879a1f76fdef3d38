// What data and eval commands derive from a loaded target and its tokenizer: the stop ids of an --eos flag and
// the token ids of a prompt (chat template). Loading the target itself: models/target_options.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "chat_template.h"
#include "target_model.h"
#include "tokenizer.h"

namespace dflash::data {

// The model's eos ids plus the tokenizer's eos (when given): any of them ends a reply.
std::vector<int64_t> stop_ids(const models::TargetModel& model, const tok::Tokenizer* t);
// An --eos flag: "config" (stop_ids above), "none", or comma-separated ids.
std::vector<int64_t> parse_stop_ids(const std::string& spec, const models::TargetModel& model, const tok::Tokenizer* t);

// Token ids of a prompt: prompt_ids as they are, or the chat template with the generation prompt.
struct Prompt;
std::vector<int64_t> prompt_token_ids(const Prompt& p, const tok::Tokenizer* t, const tok::ChatFormat* chat,
                                      const std::string& where);
// The same, checked against the target: every id inside its vocabulary, and the prompt no longer than its
// context (max_position_embeddings, when the config gives one). Throws std::invalid_argument naming `where`.
std::vector<int64_t> prompt_token_ids(const Prompt& p, const tok::Tokenizer* t, const tok::ChatFormat* chat,
                                      const std::string& where, const models::TargetConfig& target);

}  // namespace dflash::data
