// The inverse of tokenizer_json.cpp's reader for what a Tokenizer holds; every step the reader accepts maps back to
// the tokenizer.json element it came from, so reading the written file gives the same tokenizer.
#include "tokenizer_json_writer.h"

#include <nlohmann/json.hpp>

namespace dflash::tok {

namespace {

using json = nlohmann::json;

json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// HF maps bytes to the byte alphabet in its ByteLevel pre-tokenizer: exactly one is written, carrying the GPT-2
// split when the tokenizer has one (use_regex), else appended after the other steps.
json pre_tokenizer_json(const PreTokenizer& p) {
  using S = PreTokenizerStep;
  json list = json::array();
  bool has_byte_level = false;
  const auto& steps = p.steps();
  for (size_t i = 0; i < steps.size(); ++i) {
    const S& s = steps[i];
    if (s.kind == S::kDigits) {
      list.push_back({{"type", "Digits"}, {"individual_digits", s.individual_digits}});
    } else if (s.kind == S::kPrefixSpace) {
      const bool with_split = i + 1 < steps.size() && steps[i + 1].kind == S::kSplit &&
                              steps[i + 1].regex == SplitRegex::GPT2;
      list.push_back(byte_level(true, with_split));
      has_byte_level = true;
      if (with_split) ++i;
    } else if (s.regex == SplitRegex::GPT2) {
      list.push_back(byte_level(false, true));
      has_byte_level = true;
    } else {
      list.push_back({{"type", "Split"}, {"pattern", {{"Regex", split_regex_source(s.regex)}}},
                      {"behavior", "Isolated"}, {"invert", false}});
    }
  }
  if (!has_byte_level) list.push_back(byte_level(false, false));
  return list.size() == 1 ? list[0] : json{{"type", "Sequence"}, {"pretokenizers", list}};
}

// The special tokens added around a single sequence (BOS/EOS of add_bos_token / add_eos_token), or none.
json post_processor_json(const Tokenizer& t) {
  if (t.prefix_ids().empty() && t.suffix_ids().empty()) return nullptr;
  json single = json::array(), pair = json::array(), specials = json::object();
  auto special = [&](int32_t id, int type_id) {
    const std::string name = t.id_to_token(id);
    specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
    return json{{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
  };
  for (int32_t id : t.prefix_ids()) single.push_back(special(id, 0));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (int32_t id : t.suffix_ids()) single.push_back(special(id, 0));
  pair = single;
  for (int32_t id : t.prefix_ids()) pair.push_back(special(id, 1));
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  for (int32_t id : t.suffix_ids()) pair.push_back(special(id, 1));
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

}  // namespace

std::string tokenizer_json_text(const Tokenizer& t) {
  const BPE& bpe = t.bpe();
  json vocab = json::object();
  for (size_t id = 0; id < bpe.size(); ++id) vocab[bpe.token(static_cast<int32_t>(id))] = id;
  json merges = json::array();
  for (const auto& [a, b] : bpe.merges_by_rank()) merges.push_back({bpe.token(a), bpe.token(b)});
  json added = json::array();
  for (const AddedToken& a : t.added_tokens())
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", a.normalized}, {"special", a.special}});
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", t.normalizes_nfc() ? json{{"type", "NFC"}} : json(nullptr)},
            {"pre_tokenizer", pre_tokenizer_json(t.pre_tokenizer())},
            {"post_processor", post_processor_json(t)},
            {"decoder", byte_level(true, true)},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
              {"ignore_merges", bpe.ignore_merges()}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json_text(const Tokenizer& t, int64_t max_length) {
  auto token = [&](int32_t id) { return id >= 0 ? json(t.id_to_token(id)) : json(nullptr); };
  json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"bos_token", token(t.bos_id())},
            {"eos_token", token(t.eos_id())},
            {"pad_token", token(t.pad_id())},
            {"unk_token", nullptr},
            {"add_bos_token", !t.prefix_ids().empty()},
            {"add_eos_token", !t.suffix_ids().empty()},
            {"clean_up_tokenization_spaces", false}};
  if (max_length > 0) j["model_max_length"] = max_length;
  if (!t.chat_template().empty()) j["chat_template"] = t.chat_template();
  return j.dump(2) + "\n";
}

}  // namespace dflash::tok
