#include "prompt_sources.h"

#ifdef DFLASH_HAVE_ZLIB
#include <zlib.h>
#else
#include <cstdio>
#include <fstream>
#include <sstream>
#endif

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dflash::data {

#ifndef DFLASH_HAVE_ZLIB
// Built without zlib headers: plain files are read directly, .gz files through the gzip program.
std::string read_text_file(const std::string& path) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  if (!std::ifstream(path)) throw std::runtime_error(path + ": cannot open for reading");
  std::string quoted = "'";
  for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  FILE* p = ::popen(("gzip -dc -- " + quoted).c_str(), "r");
  if (!p) throw std::runtime_error(path + ": cannot run gzip to decompress it");
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) throw std::runtime_error(path + ": gzip could not decompress it");
  return out;
}
#else
std::string read_text_file(const std::string& path) {
  // gzread reads plain files unchanged, so one path serves both.
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open for reading");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw std::runtime_error(path + ": read error (" + msg + ")");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
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
    for (const auto& t : ids) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0)
        throw std::runtime_error(where + ": field 'prompt_ids' must hold non-negative integers");
      p.prompt_ids.push_back(t.get<int64_t>());
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

std::vector<Prompt> read_prompts(const std::string& path, int64_t limit) {
  const std::string text = read_text_file(path);
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
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(where + ": invalid JSON (" + e.what() + ")");
    }
    Prompt p = parse_line(j, where);
    p.index = index++;
    out.push_back(std::move(p));
  }
  return out;
}

std::string prompt_user_text(const Prompt& p) {
  std::string s;
  for (const auto& m : p.messages)
    if (m.role == "user") s += (s.empty() ? "" : "\n") + m.content;
  return s;
}

}  // namespace dflash::data
