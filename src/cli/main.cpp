// dflash: one command line for everything. Subcommands register in subcommands.cpp.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "subcommands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return dflash::cli::dispatch(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash: error: %s\n", e.what());
    return 1;
  }
}
