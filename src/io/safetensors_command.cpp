// `dflash safetensors info|copy`: inspect a file (validating it) and re-write one through our reader and
// writer (what the Python interoperability tests use).
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "atomic_output.h"
#include "io_commands.h"
#include "safetensors.h"

namespace dflash::io {

using util::Args;

int safetensors_info_main(const std::vector<std::string>& args) {
  Args a("safetensors info", "validate a safetensors file and list its tensors");
  a.option("file", "PATH", "", "the .safetensors file");
  if (!a.parse(args)) return 0;
  auto f = io::SafetensorsFile::open(a.str("file"));
  for (const auto& [k, v] : f.metadata()) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
  for (const auto& e : f.entries()) {
    std::string shape;
    for (auto d : e.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    std::printf("%s %s [%s] bytes %lld..%lld\n", e.name.c_str(), e.dtype.c_str(), shape.c_str(),
                static_cast<long long>(e.begin), static_cast<long long>(e.end));
  }
  return 0;
}

int safetensors_copy_main(const std::vector<std::string>& args) {
  Args a("safetensors copy", "read every tensor of a safetensors file and write them to a new file");
  a.option("input", "PATH", "", "source file");
  a.option("output", "PATH", "", "destination file (written atomically)");
  if (!a.parse(args)) return 0;
  if (a.given("output")) io::check_output_path(a.str("output"), "safetensors copy: --output");  // before any work
  auto f = io::SafetensorsFile::open(a.str("input"));
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (const auto& n : f.names()) ts.emplace_back(n, f.load(n));
  io::save_safetensors(a.str("output"), ts, f.metadata());
  return 0;
}

}  // namespace dflash::io
