#include "llama_cpp_convert.h"

#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "created_folder.h"
#include "input_file.h"
#include "llama_cpp_tools.h"
#include "python_driver.h"
#include "strict_json.h"
#include "target_hf_folder.h"

namespace fs = std::filesystem;

namespace dflash::exporting {

namespace {

constexpr const char* kWhat = "export --gguf";

// --target, else the run's own target as train_config.json recorded it.
std::string run_target(const std::string& run_dir, const std::string& target) {
  if (!target.empty()) return target;
  const std::string cfg = (fs::path(run_dir) / "train_config.json").string();
  nlohmann::json j;
  try {
    j = io::parse_json_strict(io::read_regular_file(cfg, 1 << 24));
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string(kWhat) + ": " + e.what() + " (the run's target; or give --target PATH)");
  }
  if (!j.is_object() || !j.contains("target") || !j["target"].is_string() || j["target"].get<std::string>().empty())
    throw std::invalid_argument(std::string(kWhat) + ": " + cfg + ": field 'target': expected the target's path, " +
                                "got none (give --target PATH)");
  return j["target"].get<std::string>();
}

const char* outtype(at::ScalarType dt) {
  switch (dt) {
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "f16";
    default: return "f32";  // fp32, and fp64 (GGUF has no f64 weights)
  }
}

}  // namespace

ConverterTarget::ConverterTarget(const std::string& run_dir, const std::string& target) {
  converter_ = util::llama_cpp_converter(kWhat);
  const std::string t = run_target(run_dir, target);
  std::error_code ec;
  if (fs::is_directory(t, ec)) {
    if (!fs::is_regular_file(fs::path(t) / "config.json", ec))
      throw std::invalid_argument(std::string(kWhat) + ": target '" + t + "': expected an HF folder with config.json " +
                                  "and tokenizer files, or a .gguf file");
    dir_ = t;
    return;
  }
  std::string tmpl = (fs::temp_directory_path() / "dflash-llama-target-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string(kWhat) + ": cannot create a temporary folder");
  temp_ = dir_ = tmpl;
  try {
    models::write_target_hf_folder(t, dir_);  // names the GGUF file when it has no such form
  } catch (...) {
    util::remove_quietly(temp_);
    throw;
  }
}

ConverterTarget::~ConverterTarget() {
  util::remove_quietly(temp_);  // not fs::remove_all: see created_folder.h
}

std::string draft_gguf_path(const std::string& out_dir) { return (fs::path(out_dir) / "draft.gguf").string(); }

void remove_draft_gguf(const std::string& out_dir) {
  std::error_code ec;
  fs::remove(draft_gguf_path(out_dir), ec);
}

std::string convert_to_gguf(const std::string& export_dir, const ConverterTarget& target, at::ScalarType dtype) {
  const std::string out = draft_gguf_path(export_dir);
  const std::string partial = (fs::path(export_dir) / ".draft.gguf.partial").string();
  std::error_code ec;
  fs::remove(partial, ec);
  const util::ProcessResult r =
      util::run_process({util::project_python(), target.converter(), export_dir, "--target-model-dir", target.dir(),
                         "--outfile", partial, "--outtype", outtype(dtype)});
  if (r.exit_code != 0 || !fs::is_regular_file(partial, ec)) {
    fs::remove(partial, ec);
    std::string why = util::last_line(r.err);
    if (why.empty()) why = util::last_line(r.out);
    throw std::runtime_error(std::string(kWhat) + ": llama.cpp's converter failed on " + export_dir + " (exit " +
                             std::to_string(r.exit_code) + "): " + (why.empty() ? "no message" : why) +
                             "; the HF folder is complete, no draft.gguf was written");
  }
  fs::rename(partial, out);
  return out;
}

}  // namespace dflash::exporting
