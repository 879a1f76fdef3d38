// Tokenizer from an HF tokenizer.json. Only what byte-level BPE tokenizers use is accepted; anything
// else (a normalizer, another model or decoder, an unknown split regex) is an error that names it,
// rather than a tokenizer that silently differs from HF.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"
#include "strict_json.h"
#include "tokenizer.h"

namespace dflash::tok {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& what) {
  throw std::runtime_error(path + ": " + field + ": " + what);
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?"; }

void add_pre_steps(const std::string& path, const std::string& field, const json& j, std::vector<PreTokenizerStep>& steps) {
  using S = PreTokenizerStep;
  std::string type = type_of(j);
  if (type == "Sequence") {
    const json& list = j.at("pretokenizers");
    for (size_t k = 0; k < list.size(); ++k) add_pre_steps(path, field + ".pretokenizers[" + std::to_string(k) + "]", list[k], steps);
  } else if (type == "ByteLevel") {
    if (j.value("add_prefix_space", false)) steps.push_back({S::kPrefixSpace, SplitRegex::GPT2, false});
    if (j.value("use_regex", true)) steps.push_back({S::kSplit, SplitRegex::GPT2, false});
  } else if (type == "Digits") {
    steps.push_back({S::kDigits, SplitRegex::GPT2, j.value("individual_digits", false)});
  } else if (type == "Split") {
    const json& pat = j.at("pattern");
    std::string regex = pat.contains("Regex") ? pat["Regex"].get<std::string>() : "";
    std::string behavior = j.value("behavior", "");
    if (behavior != "Isolated") bad(path, field + ".behavior", "'" + behavior + "' is not supported (expected Isolated)");
    if (j.value("invert", false)) bad(path, field + ".invert", "true is not supported");
    for (SplitRegex r : {SplitRegex::GPT2, SplitRegex::LLAMA3, SplitRegex::QWEN2})
      if (regex == split_regex_source(r)) {
        steps.push_back({S::kSplit, r, false});
        return;
      }
    bad(path, field + ".pattern", "regex " + pat.dump() + " is not one this tokenizer implements (GPT-2, Llama-3, Qwen2)");
  } else {
    bad(path, field, "pre-tokenizer type '" + type + "' is not supported (ByteLevel, Digits, Split, Sequence)");
  }
}

void check_decoder(const std::string& path, const std::string& field, const json& j) {
  std::string type = type_of(j);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = j.at("decoders");
    for (size_t k = 0; k < list.size(); ++k) check_decoder(path, field + ".decoders[" + std::to_string(k) + "]", list[k]);
    return;
  }
  bad(path, field, "decoder type '" + type + "' is not supported (expected ByteLevel)");
}

// Special token ids a TemplateProcessing post-processor puts before and after a single sequence.
void read_post_processor(const std::string& path, const std::string& field, const json& j, std::vector<int32_t>& prefix,
                         std::vector<int32_t>& suffix) {
  std::string type = type_of(j);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = j.at("processors");
    for (size_t k = 0; k < list.size(); ++k)
      read_post_processor(path, field + ".processors[" + std::to_string(k) + "]", list[k], prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing")
    bad(path, field, "post-processor type '" + type + "' is not supported (ByteLevel, TemplateProcessing)");
  bool seen_text = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    std::string name = item.at("SpecialToken").at("id").get<std::string>();
    const json& ids = j.at("special_tokens").at(name).at("ids");
    for (const json& id : ids) {
      const auto v = io::json_integer_in(id, 0, std::numeric_limits<int32_t>::max());
      if (!v) bad(path, field + ".special_tokens." + name + ".ids", io::json_shown(id) + " is not a token id");
      (seen_text ? suffix : prefix).push_back(static_cast<int32_t>(*v));
    }
  }
}

}  // namespace

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  return from_tokenizer_json_text(io::read_regular_file(path, size_t(1) << 30), path);
}

Tokenizer Tokenizer::from_tokenizer_json_text(const std::string& text, const std::string& path) {
  json j;
  try {
    j = io::parse_json_strict(text);  // a token given twice in "vocab" is an error, not "last one wins"
  } catch (const io::JsonError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  try {
    if (!j.is_object() || !j.contains("model")) bad(path, "model", "missing (not a tokenizer.json?)");
    const json& m = j["model"];
    if (m.contains("type") && m["type"] != "BPE") bad(path, "model.type", m["type"].dump() + " is not supported (expected BPE)");
    if (m.value("byte_fallback", false)) bad(path, "model.byte_fallback", "true is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(k) && !m[k].is_null() && m[k] != "") bad(path, std::string("model.") + k, "is not supported");
    if (m.contains("dropout") && !m["dropout"].is_null()) bad(path, "model.dropout", "BPE dropout is not supported");
    bool nfc = false;
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const json& n = j["normalizer"];
      bool ok = type_of(n) == "NFC";
      if (type_of(n) == "Sequence" && n.contains("normalizers") && n["normalizers"].size() == 1)
        ok = type_of(n["normalizers"][0]) == "NFC";
      if (!ok) bad(path, "normalizer", "type '" + type_of(n) + "' is not supported (expected null or NFC)");
      nfc = true;
    }

    const json& vocab_j = m.at("vocab");
    std::vector<std::string> vocab(vocab_j.size());
    std::vector<bool> seen(vocab_j.size(), false);
    if (!vocab_j.is_object()) bad(path, "model.vocab", "must be an object of token -> id");
    for (auto it = vocab_j.begin(); it != vocab_j.end(); ++it) {
      const auto ok = io::json_integer_in(it.value(), 0, std::numeric_limits<int32_t>::max());
      if (!ok) bad(path, "model.vocab['" + it.key() + "']", "id " + io::json_shown(it.value()) + " is not a token id");
      const int64_t id = *ok;
      if (id < 0 || static_cast<size_t>(id) >= vocab.size() || seen[id])
        bad(path, "model.vocab['" + it.key() + "']", "id " + std::to_string(id) + " is out of range or repeated (ids must be 0.." +
                                                          std::to_string(vocab.size() - 1) + ", each once)");
      seen[id] = true;
      vocab[id] = it.key();
    }
    std::vector<std::pair<std::string, std::string>> merges;
    if (m.contains("merges")) {
      const json& mj = m["merges"];
      merges.reserve(mj.size());
      for (size_t r = 0; r < mj.size(); ++r) {
        const json& e = mj[r];
        if (e.is_string()) {  // "a b"
          std::string s = e.get<std::string>();
          size_t sp = s.find(' ');
          if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
            bad(path, "model.merges[" + std::to_string(r) + "]", "'" + s + "' (expected two tokens separated by one space)");
          merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2) {  // ["a", "b"]
          merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
          bad(path, "model.merges[" + std::to_string(r) + "]", e.dump() + " (expected \"a b\" or [\"a\", \"b\"])");
        }
      }
    }
    Tokenizer t;
    t.source_ = path;
    t.nfc_ = nfc;
    t.bpe_ = BPE(std::move(vocab), merges, m.value("ignore_merges", false), path + ": model.merges");

    std::vector<PreTokenizerStep> steps;
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) add_pre_steps(path, "pre_tokenizer", j["pre_tokenizer"], steps);
    t.pre_ = PreTokenizer(std::move(steps));
    if (!j.contains("decoder") || j["decoder"].is_null()) bad(path, "decoder", "missing (expected ByteLevel)");
    check_decoder(path, "decoder", j["decoder"]);
    if (j.contains("post_processor") && !j["post_processor"].is_null())
      read_post_processor(path, "post_processor", j["post_processor"], t.prefix_ids_, t.suffix_ids_);

    if (j.contains("added_tokens")) {
      const json& list = j["added_tokens"];
      for (size_t k = 0; k < list.size(); ++k) {
        const json& a = list[k];
        std::string field = "added_tokens[" + std::to_string(k) + "]";
        if (a.value("single_word", false)) bad(path, field + ".single_word", "true is not supported");
        AddedToken tok;
        tok.content = a.at("content").get<std::string>();
        // Ids beyond the vocabulary size an index table in finish(): bounded, so a huge id cannot ask for GBs.
        const int64_t max_id = int64_t(vocab.size()) + int64_t(list.size()) + (int64_t(1) << 20);
        const auto id = io::json_integer_in(a.at("id"), 0, std::min<int64_t>(max_id, std::numeric_limits<int32_t>::max()));
        if (!id) bad(path, field + ".id", io::json_shown(a.at("id")) + " is not a token id in [0, " + std::to_string(max_id) + "]");
        tok.id = static_cast<int32_t>(*id);
        tok.special = a.value("special", false);
        tok.lstrip = a.value("lstrip", false);
        tok.rstrip = a.value("rstrip", false);
        tok.normalized = a.value("normalized", !tok.special);
        t.added_.push_back(tok);
      }
    }

    // Special token names and the chat template live in tokenizer_config.json beside the file.
    auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(cfg_path)) {
      json cfg;
      try {
        cfg = io::parse_json_strict(io::read_regular_file(cfg_path.string(), size_t(1) << 30));
      } catch (const io::JsonError& e) {
        throw std::runtime_error(cfg_path.string() + ": " + e.what());
      }
      auto id_of = [&](const char* key) -> int32_t {
        if (!cfg.contains(key) || cfg[key].is_null()) return -1;
        const json& v = cfg[key];
        std::string s = v.is_string() ? v.get<std::string>() : v.value("content", "");
        return t.token_to_id(s);
      };
      t.bos_id_ = id_of("bos_token");
      t.eos_id_ = id_of("eos_token");
      t.pad_id_ = id_of("pad_token");
      if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) t.chat_template_ = cfg["chat_template"];
    }
    t.finish();
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": unexpected tokenizer.json layout: " + e.what());
  }
}

}  // namespace dflash::tok
