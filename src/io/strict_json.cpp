#include "strict_json.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <vector>

namespace dflash::io {

namespace {

// A first pass over the text that builds nothing: it only tracks the keys of each open object and the depth.
// (nlohmann's parser callbacks would do the same in one pass, but their bookkeeping is quadratic in the size
// of an object: 200k tensor entries in a safetensors header took hours.)
class KeyChecker : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    deeper();
    frames_.emplace_back();
    frames_.back().is_object = true;
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) throw JsonError("key '" + k + "' appears twice in one object (" + where() + ")");
    f.key = k;
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    deeper();
    frames_.emplace_back();
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    syntax_error = true;  // the second pass reports it with nlohmann's message
    return false;
  }
  bool syntax_error = false;

 private:
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string key;
    bool is_object = false;
  };
  void deeper() {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth))
      throw JsonError("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  std::string where() const {
    std::string p;
    for (size_t i = 0; i + 1 < frames_.size(); ++i)
      if (frames_[i].is_object) p += (p.empty() ? "" : ".") + frames_[i].key;
    return p.empty() ? std::string("at the top level") : "in '" + p + "'";
  }
  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parse_json_strict(std::string_view text) {
  using json = nlohmann::json;
  try {
    KeyChecker check;
    json::sax_parse(text.begin(), text.end(), &check);
    return json::parse(text.begin(), text.end());  // also reports the syntax error the first pass found
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers such as 1e400
    throw JsonError(std::string("not valid JSON: ") + e.what());
  }
}

std::optional<int64_t> json_integer_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    const auto s = static_cast<int64_t>(u);
    if (s < lo || s > hi) return std::nullopt;
    return s;
  }
  if (!v.is_number_integer()) return std::nullopt;
  const int64_t s = v.get<int64_t>();
  if (s < lo || s > hi) return std::nullopt;
  return s;
}

std::string json_shown(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace dflash::io
