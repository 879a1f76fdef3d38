// `dflash doctor`: the report a user reads first on a new machine (doctor.h says what is checked): versions, the
// devices, every check as it finishes, then a pass/fail table. Exit 0 when nothing failed, 1 otherwise, 2 for bad
// flags. --json writes the same as JSON (schema in docs/DOCTOR.md); `--json -` puts it on stdout and the text on
// stderr.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "atomic_output.h"
#include "compute_settings.h"
#include "device_layout.h"
#include "doctor.h"
#include "doctor_commands.h"

namespace dflash::doctor {

using util::Args;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

const char* upper(CheckStatus s) { return s == CheckStatus::Pass ? "PASS" : s == CheckStatus::Fail ? "FAIL" : "SKIP"; }

std::string or_none(const nlohmann::json& j, const char* key) {
  const std::string s = j.value(key, "");
  return s.empty() ? "none" : s;
}

void print_versions(std::FILE* out, const nlohmann::json& v) {
  std::string isas;
  for (const auto& x : v["cpu_isas"]) isas += (isas.empty() ? "" : ", ") + x.get<std::string>();
  const std::string forced = v["cpu_isa_forced"];
  std::fprintf(out, "\nversions\n");
  std::fprintf(out, "  dflash        %s\n", v["dflash"].get<std::string>().c_str());
  std::fprintf(out, "  torch         %s (LibTorch)\n", v["torch"].get<std::string>().c_str());
  std::fprintf(out, "  CUDA          runtime %s, driver %s, cuDNN %s\n", or_none(v, "cuda_runtime").c_str(),
               or_none(v, "cuda_driver").c_str(), or_none(v, "cudnn").c_str());
  std::fprintf(out, "  CUDA kernels  %s\n",
               v["cuda_kernels"].get<bool>() ? v["cuda_archs"].get<std::string>().c_str() : "none in this build");
  std::fprintf(out, "  collectives   Gloo %s, NCCL %s\n", v["gloo"].get<bool>() ? "yes" : "no", or_none(v, "nccl").c_str());
  std::fprintf(out, "  CPU kernels   %s (this CPU runs %s%s)\n", v["cpu_isa"].get<std::string>().c_str(), isas.c_str(),
               forced.empty() ? "" : ("; DFLASH_CPU_ISA=" + forced).c_str());
  std::fprintf(out, "  threads       %lld\n", (long long)v["threads"].get<int64_t>());
}

std::string kb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1000);
  return buf;
}

// "D 64: forward 64 keys x 2 stages (47.6 KB), backward ...; D 128: ..."
std::string tiles_text(const nlohmann::json& tiles) {
  std::string out;
  int64_t head_dim = -1;
  for (const auto& t : tiles) {
    if (t["head_dim"].get<int64_t>() != head_dim) {
      head_dim = t["head_dim"];
      out += (out.empty() ? "D " : "; D ") + std::to_string(head_dim) + ":";
    } else {
      out += ",";
    }
    // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on `" " + std::string` once inlined here.
    (out += " ") += t["kernel"].get<std::string>();
    out += " ";
    if (t.contains("error")) {
      out += "unavailable";
      continue;
    }
    const int64_t stages = t["stages"];
    out += std::to_string(t["keys"].get<int64_t>()) + " keys" +
           (stages > 1 ? " x " + std::to_string(stages) + " stages" : "") + " (" + kb(t["smem_bytes"]) + ")";
  }
  return out;
}

void print_row(std::FILE* out, const CheckRow& r) {
  std::fprintf(out, "  %s  %-16s %-8s %s\n", upper(r.status), r.section.c_str(), r.device.c_str(), r.name.c_str());
  if (!r.detail.empty()) std::fprintf(out, "        %s\n", r.detail.c_str());
  std::fflush(out);
}

nlohmann::json row_json(const CheckRow& r) {
  return {{"section", r.section}, {"device", r.device}, {"name", r.name},
          {"status", check_status_name(r.status)}, {"detail", r.detail}, {"data", r.data}};
}

// The closing pass/fail table (a failed or skipped row says why beneath it); returns the counts.
nlohmann::json print_summary(std::FILE* out, const std::vector<CheckRow>& rows) {
  int passed = 0, failed = 0, skipped = 0;
  std::fprintf(out, "\nsummary\n  %-6s %-16s %-8s %s\n", "result", "section", "device", "check");
  for (const CheckRow& r : rows) {
    (r.status == CheckStatus::Pass ? passed : r.status == CheckStatus::Fail ? failed : skipped) += 1;
    std::fprintf(out, "  %-6s %-16s %-8s %s\n", upper(r.status), r.section.c_str(), r.device.c_str(), r.name.c_str());
    if (r.status != CheckStatus::Pass) std::fprintf(out, "         -> %s\n", r.detail.c_str());
  }
  std::fprintf(out, "%zu checks: %d passed, %d failed, %d skipped\n", rows.size(), passed, failed, skipped);
  return {{"pass", passed}, {"fail", failed}, {"skip", skipped}};
}

}  // namespace

int doctor_main(const std::vector<std::string>& argv) {
  Args a("doctor",
         "The first command on a new machine: versions, each device, the fused attention against the reference at\n"
         "standard shapes (forward and backward), fused vs reference time, the GEMM rate, the CPU loss kernel, a\n"
         "Gloo and an NCCL all-reduce, and with --config a run's own shapes and memory plan. Ends in a pass/fail\n"
         "table; exit 0 when every check passed, 1 when one failed (docs/DOCTOR.md).");
  a.option("devices", "LIST", "", "devices to check in the device grammar (cuda:0,cuda:1;cuda:2 ...: replicas "
                                  "flattened); default cpu and every CUDA device")
      .option("config", "FILE", "", "a train config (JSON/YAML): check its shapes and memory plan on its drafter devices")
      .option("json", "FILE", "", "also write the report as JSON to FILE ('-': to stdout, the text to stderr)")
      .option("threads", "N", "0", "CPU threads (0: every core)")
      .flag("quick", "fewer shapes (head dim 128 only) and a smaller timing shape");
  if (!a.parse(argv)) return 0;
  const std::string json_path = a.str("json");
  // The destination first: an empty path, a folder or a trailing '/' fail before any check runs.
  if (a.given("json") && json_path != "-") io::check_output_path(json_path, "doctor: --json");
  std::vector<at::Device> devices;
  try {
    ops::set_threads(a.i64("threads"), "doctor: --threads");
    if (a.given("devices")) {
      for (const auto& replica : models::parse_device_layout_spelling(a.str("devices"), "doctor: --devices").replicas)
        for (const at::Device& d : replica)
          if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    } else {
      devices = default_doctor_devices();
    }
  } catch (const util::UsageError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw util::UsageError(e.what());
  }
  const bool quick = a.on("quick");
  std::FILE* out = json_path == "-" ? stderr : stdout;
  std::optional<io::AtomicOutputFile> json_file;  // opened first: a folder that is not there fails before the checks
  if (!json_path.empty() && json_path != "-") json_file.emplace(json_path);

  nlohmann::json report = {{"schema", "dflash-doctor-1"}, {"date", utc_now()}, {"quick", quick}};
  std::fprintf(out, "dflash doctor, %s\n", report["date"].get<std::string>().c_str());
  report["versions"] = doctor_versions();
  print_versions(out, report["versions"]);

  std::vector<CheckRow> rows;
  const RowSink keep = [&](const CheckRow& r) {
    print_row(out, r);
    rows.push_back(r);
  };
  std::fprintf(out, "\ndevices\n");
  report["devices"] = nlohmann::json::array();
  std::vector<at::Device> present;  // the kernels are checked on every device that answered, a kernel image or not
  for (const at::Device& d : devices) {
    nlohmann::json description;
    keep(describe_device(d, description));
    if (description.contains("tiles")) std::fprintf(out, "        tiles (bf16): %s\n", tiles_text(description["tiles"]).c_str());
    if (description.contains("name")) present.push_back(d);
    report["devices"].push_back(description);
  }
  if (!a.given("devices") && devices.size() == 1)  // say so, rather than leave the CUDA checks out silently
    keep(run_check("device", "cuda", "cuda", [](CheckRow& row) {
      row.status = CheckStatus::Skip;
      row.detail = "no CUDA device visible: the CUDA checks are skipped (the NCCL all-reduce too)";
    }));
  std::fprintf(out, "\nchecks\n");
  for (const at::Device& d : present) check_kernels(d, quick, keep);
  check_collectives(present, keep);
  if (a.given("config")) {
    nlohmann::json summary;
    check_run_config(a.str("config"), keep, summary);
    if (!summary.is_null()) report["config"] = summary;
  }

  report["checks"] = nlohmann::json::array();
  for (const CheckRow& r : rows) report["checks"].push_back(row_json(r));
  report["counts"] = print_summary(out, rows);
  const bool passed = report["counts"]["fail"] == 0;
  report["passed"] = passed;
  std::fflush(out);
  if (json_path == "-") {
    std::printf("%s\n", report.dump(2).c_str());
  } else if (json_file) {
    json_file->write(report.dump(2) + "\n");
    json_file->commit();
  }
  return passed ? 0 : 1;
}

}  // namespace dflash::doctor
