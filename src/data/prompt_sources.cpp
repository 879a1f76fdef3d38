#include "prompt_sources.h"

#ifdef DFLASH_HAVE_ZLIB
#include <zlib.h>
#else
#include <cstdio>
#endif

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"
#include "strict_json.h"

namespace dflash::data {

namespace {
bool gz_name(const std::string& path) { return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0; }
}  // namespace

#ifndef DFLASH_HAVE_ZLIB
// Built without zlib headers: plain files are read directly, .gz files through the gzip program.
std::string read_text_file(const std::string& path) {
  if (!gz_name(path)) return io::read_regular_file(path);
  io::require_regular_file(path);  // a FIFO would block gzip, a folder confuse it
  std::string quoted = "'";
  for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  FILE* p = ::popen(("gzip -dc -- " + quoted + " 2>/dev/null").c_str(), "r");
  if (!p) throw std::runtime_error(path + ": cannot run gzip to decompress it");
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) throw std::runtime_error(path + ": corrupt or truncated gzip data (gzip -d failed)");
  return out;
}
#else
std::string read_text_file(const std::string& path) {
  if (!gz_name(path)) return io::read_regular_file(path);
  io::InputFile in(path);  // a FIFO or a folder is refused before zlib sees it
  gzFile f = gzdopen(in.release(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open for reading");
  std::string out;
  char buf[1 << 16];
  std::string error;
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      error = gzerror(f, &err);
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  // End of input inside the compressed stream (a truncated file) is no read error for gzread: it reports
  // Z_BUF_ERROR through gzerror, and the data so far would pass as a complete (often empty) file.
  int err = Z_OK;
  if (error.empty()) {
    const char* msg = gzerror(f, &err);
    if (err != Z_OK) error = msg ? msg : "zlib error " + std::to_string(err);
  }
  const bool plain = gzdirect(f) != 0;  // zlib passes non-gzip data through unchanged
  const int close_rc = gzclose(f);
  if (!error.empty() || (close_rc != Z_OK && close_rc != Z_BUF_ERROR))
    throw std::runtime_error(path + ": corrupt or truncated gzip data (" +
                             (error.empty() ? "zlib error " + std::to_string(close_rc) : error) + ")");
  if (plain && !out.empty())
    throw std::runtime_error(path + ": named .gz but not gzip-compressed (no gzip header)");
  return out;
}
#endif

namespace {

std::string need_string(const nlohmann::json& v, const std::string& where, const std::string& field) {
  if (!v.is_string()) throw std::runtime_error(where + ": field '" + field + "' must be a string");
  return v.get<std::string>();
}

Prompt parse_line(const nlohmann::json& j, const std::string& where) {
  Prompt p;
  if (!j.is_object()) throw std::runtime_error(where + ": expected a JSON object");
  if (j.contains("messages")) {
    const auto& m = j["messages"];
    if (!m.is_array() || m.empty()) throw std::runtime_error(where + ": field 'messages' must be a non-empty array");
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string w = where + ": messages[" + std::to_string(i) + "]";
      if (!m[i].is_object() || !m[i].contains("role") || !m[i].contains("content"))
        throw std::runtime_error(w + ": expected an object with 'role' and 'content'");
      p.messages.push_back({need_string(m[i]["role"], w, "role"), need_string(m[i]["content"], w, "content")});
    }
    // The target writes the reply itself: a recorded final assistant answer is dropped.
    if (p.messages.back().role == "assistant") p.messages.pop_back();
    if (p.messages.empty()) throw std::runtime_error(where + ": 'messages' has no turn before the assistant's");
    return p;
  }
  if (j.contains("prompt_ids")) {
    const auto& ids = j["prompt_ids"];
    if (!ids.is_array() || ids.empty()) throw std::runtime_error(where + ": field 'prompt_ids' must be a non-empty array");
    for (size_t k = 0; k < ids.size(); ++k) {
      const auto id = io::json_integer_in(ids[k], 0, 2147483647);  // 3.0 or 3.7 is no token id
      if (!id)
        throw std::runtime_error(where + ": field 'prompt_ids[" + std::to_string(k) + "]' is " +
                                 io::json_shown(ids[k]) + ", expected a token id (an integer in [0, 2147483647])");
      p.prompt_ids.push_back(*id);
    }
    return p;
  }
  if (j.contains("turns")) {
    const auto& t = j["turns"];
    if (!t.is_array() || t.empty()) throw std::runtime_error(where + ": field 'turns' must be a non-empty array");
    p.messages.push_back({"user", need_string(t[0], where, "turns[0]")});
    return p;
  }
  if (j.contains("question")) {
    p.messages.push_back({"user", need_string(j["question"], where, "question")});
    return p;
  }
  if (j.contains("prompt")) {
    p.messages.push_back({"user", need_string(j["prompt"], where, "prompt")});
    return p;
  }
  throw std::runtime_error(where + ": no prompt field; expected one of 'messages', 'prompt_ids', 'turns', "
                           "'question', 'prompt'");
}

}  // namespace

std::vector<Prompt> parse_prompts(const std::string& text, const std::string& path, int64_t limit) {
  std::vector<Prompt> out;
  size_t pos = 0;
  int64_t line_no = 0, index = 0;
  while (pos < text.size() && (limit < 0 || index < limit)) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = io::parse_json_strict(line);
    } catch (const io::JsonError& e) {
      throw std::runtime_error(where + ": invalid JSON (" + e.what() + ")");
    }
    Prompt p = parse_line(j, where);
    p.index = index++;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Prompt> read_prompts(const std::string& path, int64_t limit) {
  std::vector<Prompt> out = parse_prompts(read_text_file(path), path, limit);
  // An empty result from a non-empty request is a damaged or wrong file, not "nothing to do".
  if (out.empty() && limit != 0) throw std::runtime_error(path + ": holds no prompts (empty file?)");
  return out;
}

std::string prompt_user_text(const Prompt& p) {
  std::string s;
  for (const auto& m : p.messages)
    if (m.role == "user") s += (s.empty() ? "" : "\n") + m.content;
  return s;
}

}  // namespace dflash::data
