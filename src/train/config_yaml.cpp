#include "config_yaml.h"

#include <cerrno>
#include <cstdlib>
#include <set>
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

void apply_yaml_settings(TrainConfig& c, const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                                ": invalid YAML: " + e.msg);
  }
  if (root.IsNull()) return;  // empty file or only comments: no settings
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
