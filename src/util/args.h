// A small flag parser: declared options with defaults and help text, aliases (an old spelling that still
// works), and positional arguments; unknown flags and bad values are errors that name the flag and what
// was expected.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "number_range.h"

namespace dflash::util {

// A mistake on the command line itself (unknown flag, bad value, missing argument): `dflash` exits with 2, other
// errors exit with 1.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declare before parse(). `value_name` empty means a boolean switch.
  Args& option(const std::string& name, const std::string& value_name, const std::string& def, const std::string& help);
  Args& flag(const std::string& name, const std::string& help) { return option(name, "", "", help); }
  // The range of a number option, checked by f64() / i64() whenever the value is read (flag or default); outside it,
  // std::invalid_argument "<command>: --<name> must be <range><note>, got <value>" (util/number_range.h).
  Args& range(const std::string& name, const NumberRange& r, const std::string& note = "");
  Args& range(const std::string& name, int64_t lo, int64_t hi, const std::string& note = "");
  // --alias means --name (an older spelling kept working); help lists it beside the option.
  Args& alias(const std::string& alias, const std::string& name);
  // --old is a spelling that no longer works: giving it is a UsageError "<command>: --old is now --name", so a
  // script written for the old spelling stops with the new one named instead of a silent alias.
  Args& renamed(const std::string& old, const std::string& name);
  // A positional argument, filled in declaration order; read it with str(name). Required unless a default is
  // given (`def` non-empty or `optional`).
  Args& positional(const std::string& name, const std::string& help, bool optional = false);

  // Returns false when --help was asked for (help already printed); throws UsageError on bad input.
  bool parse(const std::vector<std::string>& argv);

  const std::string& command() const { return command_; }
  std::string str(const std::string& name) const;
  int64_t i64(const std::string& name) const;
  double f64(const std::string& name) const;
  bool on(const std::string& name) const;
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  bool declared(const std::string& name) const { return opts_.count(name) > 0; }
  std::vector<int64_t> i64_list(const std::string& name) const;  // comma-separated
  std::vector<std::string> str_list(const std::string& name) const;
  // Throws UsageError "<command>: --<name> is required" when the option was left empty.
  void require(const std::string& name) const;
  // A setting the command would not use is refused, never dropped without a word: throws UsageError
  // "<command>: --<name> is not used <why>" for the first of `names` that was given.
  void refuse_given(const std::vector<std::string>& names, const std::string& why) const;

  std::string help() const;

 private:
  struct Opt {
    std::string value_name, def, help;
  };
  struct Positional {
    std::string name, help;
    bool optional = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Opt> opts_;
  std::map<std::string, std::string> aliases_;  // alias -> option name
  std::map<std::string, std::string> renamed_;  // old spelling -> option name
  std::vector<Positional> positionals_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
  struct IntRange {
    int64_t lo, hi;
    std::string note;
  };
  std::map<std::string, std::pair<NumberRange, std::string>> number_ranges_;
  std::map<std::string, IntRange> int_ranges_;
};

}  // namespace dflash::util
