#include "token_records.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "held_out.h"
#include "prompt_sources.h"

namespace dflash::data {

std::vector<TokenRecord> read_token_records(const std::string& path, int64_t limit, bool skip_partial_last_line) {
  const std::string text = read_text_file(path);
  std::vector<TokenRecord> out;
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size() && (limit < 0 || int64_t(out.size()) < limit)) {
    size_t end = text.find('\n', pos);
    const bool last_unterminated = end == std::string::npos;
    if (last_unterminated) end = text.size();
    const std::string l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    TokenRecord r;
    r.where = path + ":" + std::to_string(line);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(l);
    } catch (const std::exception& e) {
      if (last_unterminated && skip_partial_last_line) {
        std::fprintf(stderr, "%s: ignoring an unterminated last line\n", r.where.c_str());
        break;
      }
      throw std::invalid_argument(r.where + ": invalid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("input_ids") || !j.contains("loss_mask") || !j["input_ids"].is_array() ||
        !j["loss_mask"].is_array())
      throw std::invalid_argument(r.where + ": expected {\"input_ids\": [...], \"loss_mask\": [...]}");
    if (const std::string why = held_out_record_reason(j); !why.empty())
      throw std::invalid_argument(r.where + ": held-out sample, never used as training data: " + why);
    try {
      r.ids = j["input_ids"].get<std::vector<int64_t>>();
      for (const auto& v : j["loss_mask"]) r.mask.push_back(v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>());
    } catch (const std::exception&) {
      throw std::invalid_argument(r.where + ": input_ids and loss_mask must be integer arrays");
    }
    if (j.contains("index") && j["index"].is_number_integer()) r.index = j["index"].get<int64_t>();
    if (r.ids.size() != r.mask.size())
      throw std::invalid_argument(r.where + ": input_ids and loss_mask differ in length (" +
                                  std::to_string(r.ids.size()) + " vs " + std::to_string(r.mask.size()) + ")");
    if (r.ids.size() < 2) throw std::invalid_argument(r.where + ": a sample needs at least 2 tokens");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dflash::data
