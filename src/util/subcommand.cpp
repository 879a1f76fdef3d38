#include "subcommand.h"

#include <cstdio>

namespace dflash::util {
namespace {

void print_usage(FILE* out, const char* program, const std::vector<Subcommand>& table,
                 const std::vector<std::string>& prefix) {
  std::fprintf(out, "usage: %s <subcommand> [options]   (%s <subcommand> --help for its options)\n\n", program, program);
  for (const auto& c : table) {
    bool match = prefix.size() <= c.path.size();
    for (size_t i = 0; match && i < prefix.size(); ++i) match = c.path[i] == prefix[i];
    if (!match) continue;
    std::string name;
    for (const auto& p : c.path) name += (name.empty() ? "" : " ") + p;
    std::fprintf(out, "  %-22s %s\n", name.c_str(), c.summary);
  }
}

}  // namespace

int dispatch(const std::vector<Subcommand>& table, const std::vector<std::string>& args, const char* program) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(stdout, program, table, {});
    return args.empty() ? 2 : 0;
  }
  const Subcommand* best = nullptr;
  for (const auto& c : table) {
    if (c.path.size() > args.size()) continue;
    bool match = true;
    for (size_t i = 0; match && i < c.path.size(); ++i) match = c.path[i] == args[i];
    if (match && (!best || c.path.size() > best->path.size())) best = &c;
  }
  if (!best) {
    // A group word alone ("dflash bench") or with --help lists the group's entries.
    const std::vector<std::string> group{args[0]};
    const bool asked_help = args.size() == 1 || args[1] == "--help" || args[1] == "-h";
    bool known_group = false;
    for (const auto& c : table) known_group = known_group || (c.path.size() > 1 && c.path[0] == args[0]);
    if (known_group && asked_help) {
      print_usage(stdout, program, table, group);
      return args.size() == 1 ? 2 : 0;
    }
    std::fprintf(stderr, "%s: unknown subcommand '%s'\n", program,
                 args.size() > 1 && known_group ? (args[0] + " " + args[1]).c_str() : args[0].c_str());
    print_usage(stderr, program, table, known_group ? group : std::vector<std::string>{});
    return 2;
  }
  return best->run(std::vector<std::string>(args.begin() + best->path.size(), args.end()));
}

}  // namespace dflash::util
