#include "token_records.h"

#include <cstdio>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "held_out.h"
#include "prompt_sources.h"
#include "strict_json.h"

namespace dflash::data {

std::vector<TokenRecord> read_token_records(const std::string& path, int64_t limit, bool skip_partial_last_line) {
  return parse_token_records(read_text_file(path), path, limit, skip_partial_last_line);
}

std::vector<TokenRecord> parse_token_records(const std::string& text, const std::string& path, int64_t limit,
                                             bool skip_partial_last_line) {
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
      j = io::parse_json_strict(l);
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
    // Token ids are integers: 3.0 or 3.7 is an error, not token 3 (nlohmann's get<int64_t> would truncate).
    const auto& ids = j["input_ids"];
    r.ids.reserve(ids.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      const auto id = io::json_integer_in(ids[k], 0, 2147483647);
      if (!id)
        throw std::invalid_argument(r.where + ": input_ids[" + std::to_string(k) + "] is " + io::json_shown(ids[k]) +
                                    ", expected a token id (an integer in [0, 2147483647])");
      r.ids.push_back(*id);
    }
    const auto& mask = j["loss_mask"];
    r.mask.reserve(mask.size());
    for (size_t k = 0; k < mask.size(); ++k) {
      const auto& v = mask[k];
      const auto m = v.is_boolean() ? std::optional<int64_t>(v.get<bool>()) : io::json_integer_in(v, 0, 1);
      if (!m)
        throw std::invalid_argument(r.where + ": loss_mask[" + std::to_string(k) + "] is " + io::json_shown(v) +
                                    ", expected 0, 1, true or false");
      r.mask.push_back(*m);
    }
    if (j.contains("index")) {
      const auto idx = io::json_integer_in(j["index"], 0, std::numeric_limits<int64_t>::max());
      if (!idx) throw std::invalid_argument(r.where + ": index is " + io::json_shown(j["index"]) + ", expected an integer >= 0");
      r.index = *idx;
    }
    if (r.ids.size() != r.mask.size())
      throw std::invalid_argument(r.where + ": input_ids and loss_mask differ in length (" +
                                  std::to_string(r.ids.size()) + " vs " + std::to_string(r.mask.size()) + ")");
    if (r.ids.size() < 2) throw std::invalid_argument(r.where + ": a sample needs at least 2 tokens");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dflash::data
