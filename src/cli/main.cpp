// dflash: one command line for everything. Subcommands register in subcommands.cpp.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "subcommands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return dflash::cli::dispatch(args);
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ stack trace: a mistake in the input is no crash report.
    std::string msg = e.what_without_backtrace();
    if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    std::fprintf(stderr, "dflash: error: %s\n", msg.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash: error: %s\n", e.what());
    return 1;
  }
}
