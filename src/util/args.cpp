#include "args.h"

#include <cstdio>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace dflash::util {

Args& Args::option(const std::string& name, const std::string& value_name, const std::string& def,
                   const std::string& help) {
  order_.push_back(name);
  opts_[name] = Opt{value_name, def, help};
  return *this;
}

Args& Args::range(const std::string& name, const NumberRange& r, const std::string& note) {
  if (!opts_.count(name)) throw std::logic_error("range of undeclared option --" + name);
  number_ranges_[name] = {r, note};
  return *this;
}

Args& Args::range(const std::string& name, int64_t lo, int64_t hi, const std::string& note) {
  if (!opts_.count(name)) throw std::logic_error("range of undeclared option --" + name);
  int_ranges_[name] = {lo, hi, note};
  return *this;
}

Args& Args::alias(const std::string& alias, const std::string& name) {
  if (!opts_.count(name)) throw std::logic_error("alias --" + alias + " of undeclared option --" + name);
  aliases_[alias] = name;
  return *this;
}

Args& Args::renamed(const std::string& old, const std::string& name) {
  if (!opts_.count(name)) throw std::logic_error("old spelling --" + old + " of undeclared option --" + name);
  renamed_[old] = name;
  return *this;
}

Args& Args::positional(const std::string& name, const std::string& help, bool optional) {
  positionals_.push_back({name, help, optional});
  return *this;
}

bool Args::parse(const std::vector<std::string>& argv) {
  size_t next_positional = 0;
  bool options_ended = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (!options_ended && (a == "--help" || a == "-h")) {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (!options_ended && a == "--") {
      options_ended = true;
      continue;
    }
    if (options_ended || a.rfind("--", 0) != 0) {
      if (next_positional >= positionals_.size())
        throw UsageError(command_ + ": unexpected argument '" + a + "'\n" + help());
      const std::string& p = positionals_[next_positional++].name;
      values_[p] = a;
      given_[p] = true;
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (const auto al = aliases_.find(name); al != aliases_.end()) name = al->second;
    if (const auto r = renamed_.find(name); r != renamed_.end())
      throw UsageError(command_ + ": --" + name + " is now --" + r->second);
    const auto it = opts_.find(name);
    if (it == opts_.end()) throw UsageError(command_ + ": unknown option --" + name + "\n" + help());
    if (it->second.value_name.empty()) {
      if (inline_value) throw UsageError(command_ + ": --" + name + " takes no value");
      // Not `value = "1"`: GCC 12 -O3 warns (-Wrestrict, a false positive in its inlined string replace) on
      // assigning a literal to this string; a one-character construct-and-move is the same value.
      value = std::string(1, '1');
    } else if (!inline_value) {
      if (i + 1 >= argv.size())
        throw UsageError(command_ + ": --" + name + " needs a value (" + it->second.value_name + ")");
      value = argv[++i];
    }
    values_[name] = value;
    given_[name] = true;
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p)
    if (!positionals_[p].optional)
      throw UsageError(command_ + ": " + positionals_[p].name + " is missing: " + positionals_[p].help + "\n" +
                                  help());
  return true;
}

void Args::require(const std::string& name) const {
  if (str(name).empty()) throw UsageError(command_ + ": --" + name + " is required");
}

void Args::refuse_given(const std::vector<std::string>& names, const std::string& why) const {
  for (const std::string& name : names)
    if (given(name)) throw UsageError(command_ + ": --" + name + " is not used " + why);
}

std::string Args::str(const std::string& name) const {
  const auto v = values_.find(name);
  if (v != values_.end()) return v->second;
  const auto o = opts_.find(name);
  if (o == opts_.end()) throw std::logic_error("option --" + name + " was not declared");
  return o->second.def;
}

int64_t Args::i64(const std::string& name) const {
  const std::string s = str(name);
  std::optional<int64_t> v;
  try {
    size_t pos = 0;
    const long long x = std::stoll(s, &pos);
    if (pos == s.size()) v = x;
  } catch (const std::exception&) {
  }
  if (!v) throw UsageError(command_ + ": --" + name + " expects an integer, got '" + s + "'");
  if (const auto r = int_ranges_.find(name); r != int_ranges_.end())
    check_integer(*v, r->second.lo, r->second.hi, command_ + ": --" + name, r->second.note);
  return *v;
}

double Args::f64(const std::string& name) const {
  const std::string s = str(name);
  std::optional<double> v;
  try {
    size_t pos = 0;
    const double x = std::stod(s, &pos);
    if (pos == s.size()) v = x;
  } catch (const std::exception&) {
  }
  if (!v) throw UsageError(command_ + ": --" + name + " expects a number, got '" + s + "'");
  if (const auto r = number_ranges_.find(name); r != number_ranges_.end())
    check_number(*v, r->second.first, command_ + ": --" + name, r->second.second);
  return *v;
}

bool Args::on(const std::string& name) const { return str(name) == "1"; }

std::vector<std::string> Args::str_list(const std::string& name) const {
  std::vector<std::string> out;
  std::stringstream ss(str(name));
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> Args::i64_list(const std::string& name) const {
  std::vector<int64_t> out;
  for (const auto& s : str_list(name)) {
    try {
      size_t pos = 0;
      out.push_back(std::stoll(s, &pos));
      if (pos != s.size()) throw UsageError(s);
    } catch (const std::exception&) {
      throw UsageError(command_ + ": --" + name + " expects comma-separated integers, got '" + s + "'");
    }
  }
  return out;
}

std::string Args::help() const {
  std::string usage = "usage: dflash " + command_;
  for (const auto& p : positionals_) usage += p.optional ? " [" + p.name + "]" : " " + p.name;
  std::string h = usage + " [options]\n\n" + summary_ + "\n";
  auto row = [](std::string left, const std::string& text) {
    if (left.size() < 28) left.resize(28, ' ');
    return left + " " + text + "\n";
  };
  if (!positionals_.empty()) {
    h += "\narguments:\n";
    for (const auto& p : positionals_) h += row("  " + p.name, p.help);
  }
  h += "\noptions:\n";
  for (const auto& n : order_) {
    const Opt& o = opts_.at(n);
    std::string text = o.help + (o.def.empty() || o.value_name.empty() ? "" : " (default: " + o.def + ")");
    for (const auto& [al, target] : aliases_)
      if (target == n) text += " (also --" + al + ")";
    h += row("  --" + n + (o.value_name.empty() ? "" : " " + o.value_name), text);
  }
  h += row("  --help", "show this help");
  return h;
}

}  // namespace dflash::util
