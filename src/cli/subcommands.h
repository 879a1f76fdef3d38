// The table of `dflash <subcommand>` entries and their dispatch.
#pragma once
#include <string>
#include <vector>

namespace dflash::cli {

struct Subcommand {
  std::vector<std::string> path;  // e.g. {"bench", "attention"}
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // args after the path
};

const std::vector<Subcommand>& subcommands();
int dispatch(const std::vector<std::string>& args);

}  // namespace dflash::cli
