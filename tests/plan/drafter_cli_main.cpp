// Stand-alone entry to the planner's and the drafter's commands (`drafter_cli plan|bench step|bench flops|drafter
// selftest ...`) for the Python tests, so they do not depend on every other subcommand of `dflash` linking.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "args.h"
#include "drafter_commands.h"
#include "plan_commands.h"

int main(int argc, char** argv) {
  auto table = dflash::plan::commands();
  for (const auto& c : dflash::drafter::commands()) table.push_back(c);
  try {
    return dflash::util::dispatch(table, std::vector<std::string>(argv + 1, argv + argc), "drafter_cli");
  } catch (const dflash::util::UsageError& e) {
    std::fprintf(stderr, "drafter_cli: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drafter_cli: error: %s\n", e.what());
    return 1;
  }
}
