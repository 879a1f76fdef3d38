#include "config_yaml.h"

#include <cerrno>
#include <cstdlib>
#include <set>
#include <vector>
#include <stdexcept>

#ifdef DFLASH_HAVE_YAML
#include <yaml-cpp/yaml.h>
#endif

namespace dflash::train {

#ifdef DFLASH_HAVE_YAML
namespace {

std::string at_line(const std::string& path, const YAML::Mark& m) {
  return m.is_null() ? path : path + ":" + std::to_string(m.line + 1);
}

std::string kind_of(const std::string& key) {
  for (const auto& f : train_fields())
    if (f.key == key) return f.kind;
  return "";  // unknown: apply_json reports it with the valid keys
}

// A YAML value as the JSON value apply_json expects for a field of `kind`. A value that does not read as
// the kind stays a string (or its dump), so apply_json's type error names the expected kind and the text.
nlohmann::json to_json_value(const YAML::Node& v, const std::string& kind) {
  if (v.IsNull()) return nullptr;
  if (v.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : v) o[kv.first.Scalar()] = "...";
    return o;
  }
  if (v.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : v) {
      if (!e.IsScalar()) return nlohmann::json::array({"<nested>"});
      a.push_back(e.Scalar());
    }
    return a;
  }
  const std::string& s = v.Scalar();
  const bool quoted = v.Tag() == "!";  // "text" or 'text': always a string, as in JSON
  if (kind == "str" || quoted || s.empty()) return s;
  if (kind == "int") {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end && *end == '\0') return int64_t(x);
  } else if (kind == "float") {
    errno = 0;
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (errno == 0 && end && *end == '\0' && s.find_first_of("nN") == std::string::npos) return x;
  } else if (kind == "bool") {
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  return s;
}

}  // namespace

bool yaml_supported() { return true; }

namespace {

// Scans the text for what one-document parsing would drop without a word: a second document (a "---" line after
// content, or content after a "..." line; markers only count at column 0, so block scalars cannot fake them),
// and whether there is any content at all. yaml-cpp's LoadAll is not used: version 0.7 loops forever on some
// inputs (a document that starts with ',').
struct YamlOutline {
  bool content = false;
  int second_doc_line = 0;  // 1-based; 0: none
};

YamlOutline outline(const std::string& text) {
  YamlOutline o;
  bool ended = false;  // after "..."
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size() && o.second_doc_line == 0) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    auto marker = [&](const char* m) {
      return line.compare(0, 3, m) == 0 && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    };
    const auto first = line.find_first_not_of(" \t\r");
    const bool blank = first == std::string::npos || line[first] == '#';
    if (marker("---")) {
      if (o.content || ended) o.second_doc_line = line_no;
      const auto rest = line.find_first_not_of(" \t\r", 3);
      if (rest != std::string::npos && line[rest] != '#') o.content = true;  // "--- {lr: 1}"
    } else if (marker("...")) {
      ended = true;
    } else if (!blank && !(line[0] == '%' && !o.content)) {  // %YAML directives come before the first document
      if (ended) o.second_doc_line = line_no;
      o.content = true;
    }
    if (end == text.size()) break;
  }
  return o;
}

}  // namespace

void apply_yaml_settings(TrainConfig& c, const std::string& text, const std::string& path) {
  const YamlOutline o = outline(text);
  // A second document ("---" then more settings) would otherwise be ignored without a word.
  if (o.second_doc_line > 0)
    throw std::invalid_argument(path + ":" + std::to_string(o.second_doc_line) +
                                ": a second YAML document (after '---' or '...'); a settings file holds one mapping "
                                "of settings");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument((e.mark.is_null() ? path : path + ":" + std::to_string(e.mark.line + 1) + ":" +
                                                              std::to_string(e.mark.column + 1)) +
                                ": invalid YAML: " + e.msg);
  }
  if (root.IsNull()) {
    if (!o.content) return;  // empty file or only comments: no settings
    // yaml-cpp reads some invalid text (such as ",x") as an empty document: refuse instead of ignoring it.
    throw std::invalid_argument(path + ": invalid YAML: text that is no mapping of settings (key: value lines)");
  }
  if (!root.IsMap())
    throw std::invalid_argument(at_line(path, root.Mark()) + ": expected a YAML mapping of settings (key: value lines)");
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string where = at_line(path, kv.first.Mark());
    if (!kv.first.IsScalar()) throw std::invalid_argument(where + ": setting names must be plain keys");
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) throw std::invalid_argument(where + ": key '" + key + "' is given twice");
    nlohmann::json one = nlohmann::json::object();
    one[key] = to_json_value(kv.second, kind_of(key));
    apply_json(c, one, where);
  }
}
#else
bool yaml_supported() { return false; }

void apply_yaml_settings(TrainConfig&, const std::string&, const std::string& path) {
  throw std::invalid_argument(path + ": this build reads no YAML (install Debian's libyaml-cpp-dev and re-run cmake), "
                              "or write the same keys as JSON");
}
#endif

}  // namespace dflash::train
