#include "eval_tracking.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "python_driver.h"

namespace fs = std::filesystem;

namespace dflash::eval {

void report_eval_to_trackers(const std::string& drafter, const nlohmann::json& results) {
  const fs::path settings = fs::path(drafter) / "train_config.json";
  if (!fs::is_regular_file(settings)) return;  // an exported folder, not a run
  std::ifstream in(settings);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto it = j.is_object() ? j.find("report_to") : j.end();
  if (it == j.end() || !it->is_string() || it->get<std::string>() == "none" || it->get<std::string>().empty()) return;
  const auto r = util::run_python("report.py", {"eval", drafter, "--results", results.dump()});
  if (r.exit_code != 0)
    std::fprintf(stderr, "eval: the results did not reach the trackers (report.py exited with %d; %s)\n", r.exit_code,
                 (fs::path(drafter) / "report" / "report.log").c_str());
}

}  // namespace dflash::eval
