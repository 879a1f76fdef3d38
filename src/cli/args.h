// A small flag parser: declared options with defaults and help text; unknown flags and bad values
// are errors that name the flag and what was expected.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dflash::cli {

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declare before parse(). `value_name` empty means a boolean switch.
  Args& option(const std::string& name, const std::string& value_name, const std::string& def, const std::string& help);
  Args& flag(const std::string& name, const std::string& help) { return option(name, "", "", help); }

  // Returns false when --help was asked for (help already printed); throws on bad input.
  bool parse(const std::vector<std::string>& argv);

  std::string str(const std::string& name) const;
  int64_t i64(const std::string& name) const;
  double f64(const std::string& name) const;
  bool on(const std::string& name) const;
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  std::vector<int64_t> i64_list(const std::string& name) const;  // comma-separated
  std::vector<std::string> str_list(const std::string& name) const;

  std::string help() const;

 private:
  struct Opt {
    std::string value_name, def, help;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Opt> opts_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
};

}  // namespace dflash::cli
