// Stand-alone entry to the drafter layer's commands (`drafter_cli plan|bench step|drafter selftest ...`) for
// the Python tests, so they do not depend on every other subcommand of `dflash` linking.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "args.h"
#include "drafter_commands.h"

int main(int argc, char** argv) {
  try {
    return dflash::util::dispatch(dflash::drafter::commands(), std::vector<std::string>(argv + 1, argv + argc),
                                  "drafter_cli");
  } catch (const dflash::util::UsageError& e) {
    std::fprintf(stderr, "drafter_cli: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drafter_cli: error: %s\n", e.what());
    return 1;
  }
}
