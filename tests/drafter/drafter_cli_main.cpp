// Stand-alone entry to the drafter's commands (`drafter_cli selftest|plan|bench-step ...`) for the Python
// tests, so they do not depend on every other subcommand of `dflash` linking.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace dflash::cli {
int drafter_selftest_main(const std::vector<std::string>& args);
int plan_main(const std::vector<std::string>& args);
int bench_step_main(const std::vector<std::string>& args);
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: drafter_cli selftest|plan|bench-step [options]\n");
    return 2;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "selftest") return dflash::cli::drafter_selftest_main(args);
    if (cmd == "plan") return dflash::cli::plan_main(args);
    if (cmd == "bench-step") return dflash::cli::bench_step_main(args);
    std::fprintf(stderr, "drafter_cli: unknown command '%s'\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drafter_cli: error: %s\n", e.what());
    return 1;
  }
}
