// A table of `dflash <words...>` subcommands and the dispatcher that picks the longest matching entry.
// Each layer lists its own commands (src/<layer>/<layer>_commands.h); src/cli joins the tables.
#pragma once
#include <string>
#include <vector>

namespace dflash::util {

struct Subcommand {
  std::vector<std::string> path;  // e.g. {"bench", "attention"}
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // args after the path
};

// Runs the entry `args` names. No arguments, or a group word alone ("dflash bench"), lists the entries and
// returns 2; --help lists them and returns 0; an unknown word is an error (2) that lists what exists.
// `program` prefixes the usage line and messages.
int dispatch(const std::vector<Subcommand>& table, const std::vector<std::string>& args, const char* program);

}  // namespace dflash::util
