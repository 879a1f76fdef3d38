// Stand-alone entry to `dflash drafter selftest` for the Python reference tests (so they do not depend on
// every other subcommand linking).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace dflash::cli {
int drafter_selftest_main(const std::vector<std::string>& args);
}

int main(int argc, char** argv) {
  try {
    return dflash::cli::drafter_selftest_main(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drafter_selftest: error: %s\n", e.what());
    return 1;
  }
}
