// dflash: one command line for everything. Every layer lists its own subcommands (src/<layer>/*_commands.h);
// this file only joins the tables and dispatches. Exit codes: 0 done, 1 error, 2 usage error (bad flags, unknown
// subcommand), 3 eval found a lossless mismatch, 130 interrupted (train, after a checkpoint).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "args.h"
#include "data_commands.h"
#include "doctor_commands.h"
#include "environment_switches.h"
#include "drafter_commands.h"
#include "eval_commands.h"
#include "export_commands.h"
#include "families_table.h"
#include "family_models_table.h"
#include "io_commands.h"
#include "models_commands.h"
#include "ops_commands.h"
#include "plan_commands.h"
#include "subcommand.h"
#include "tokenizer_commands.h"
#include "train_commands.h"

namespace {

// In the order a user meets them: the machine check, data, training, export, evaluation, then the planner, the
// tools and benchmarks below them.
std::vector<dflash::util::Subcommand> all_commands() {
  std::vector<dflash::util::Subcommand> table;
  for (auto part : {dflash::doctor::commands(), dflash::data::commands(), dflash::train::commands(),
                    dflash::exporting::commands(), dflash::eval::commands(), dflash::plan::commands(),
                    dflash::drafter::commands(), dflash::models::commands(), dflash::ops::commands(),
                    dflash::tok::commands(), dflash::io::commands()})
    table.insert(table.end(), part.begin(), part.end());
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    dflash::families::register_builtin_families();
    dflash::families::register_builtin_family_models();
    dflash::ops::check_environment_switches();  // a malformed switch is refused by every command, not dropped
    return dflash::util::dispatch(all_commands(), args, "dflash");
  } catch (const dflash::util::UsageError& e) {
    std::fprintf(stderr, "dflash: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // LibTorch errors carry their C++ stack trace after the message: a mistake in the input is no crash report.
    std::string msg = e.what();
    if (const auto trace = msg.find("\nException raised from "); trace != std::string::npos) msg.resize(trace);
    std::fprintf(stderr, "dflash: error: %s\n", msg.c_str());
    return 1;
  }
}
