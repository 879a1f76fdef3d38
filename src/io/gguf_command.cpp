// `dflash gguf info FILE [--json]` and `dflash gguf dequant FILE --tensor NAME --output OUT.f32`:
// inspect a GGUF file, or dump one tensor dequantised to raw little-endian float32.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "atomic_output.h"
#include "gguf.h"
#include "io_commands.h"

namespace dflash::io {

using util::Args;

namespace {

using io::GGUFValue;
using io::GGUFValueType;

nlohmann::json value_json(const GGUFValue& v) {
  switch (v.type()) {
    case GGUFValueType::UINT8: case GGUFValueType::UINT16: case GGUFValueType::UINT32: case GGUFValueType::UINT64:
      return v.u();
    case GGUFValueType::INT8: case GGUFValueType::INT16: case GGUFValueType::INT32: case GGUFValueType::INT64:
      return v.i();
    case GGUFValueType::FLOAT32: case GGUFValueType::FLOAT64: return v.f();
    case GGUFValueType::BOOL: return v.b();
    case GGUFValueType::STRING: return std::string(v.s());
    case GGUFValueType::ARRAY: {
      auto a = nlohmann::json::array();
      for (uint64_t k = 0; k < v.size(); ++k) a.push_back(value_json(v.item(k)));
      return a;
    }
  }
  return nullptr;
}

std::string type_name(const GGUFValue& v) {
  std::string t = io::gguf_value_type_name(v.type());
  if (v.is_array()) t += std::string("[") + io::gguf_value_type_name(v.elem_type()) + "]";
  return t;
}

// Splits off the leading FILE argument (the flag parser takes only --options).
std::string take_file(std::vector<std::string>& args, const char* usage) {
  if (!args.empty() && args[0].rfind("--", 0) != 0) {
    std::string f = args[0];
    args.erase(args.begin());
    return f;
  }
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return "";
  throw std::invalid_argument(std::string("missing FILE\nusage: ") + usage);
}

}  // namespace

int gguf_info_main(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  const char* usage = "dflash gguf info FILE [--json]";
  std::string file = take_file(args, usage);
  Args a("gguf info", std::string("print a GGUF file's header, metadata and tensors\nusage: ") + usage);
  a.flag("json", "print everything as one JSON object (arrays in full)");
  if (!a.parse(args)) return 0;
  auto f = io::GGUFFile::open(file);
  if (a.on("json")) {
    nlohmann::json j;
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["file_size"] = f.file_size();
    auto md = nlohmann::json::object();
    auto types = nlohmann::json::object();
    for (const auto& [k, v] : f.metadata()) {
      md[std::string(k)] = value_json(v);
      types[std::string(k)] = type_name(v);
    }
    j["metadata"] = md;
    j["metadata_types"] = types;
    auto ts = nlohmann::json::array();
    for (const auto& t : f.tensors())
      ts.push_back({{"name", t.name}, {"ne", t.ne}, {"type", io::ggml_type_info(static_cast<uint32_t>(t.type))->name},
                    {"offset", t.offset}, {"nbytes", t.nbytes}});
    j["tensors"] = ts;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s: GGUF v%u, %zu metadata entries, %zu tensors, alignment %llu, data at %llu, size %llu\n",
              file.c_str(), f.version(), f.metadata().size(), f.tensors().size(),
              static_cast<unsigned long long>(f.alignment()), static_cast<unsigned long long>(f.data_offset()),
              static_cast<unsigned long long>(f.file_size()));
  for (const auto& [k, v] : f.metadata()) {
    std::string shown;
    if (v.is_array()) {
      nlohmann::json head = nlohmann::json::array();
      for (uint64_t i = 0; i < v.size() && i < 8; ++i) head.push_back(value_json(v.item(i)));
      shown = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (v.size() > 8) shown += " ... (" + std::to_string(v.size()) + " items)";
    } else {
      shown = value_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
    }
    std::printf("  %-45s %-16s %s\n", std::string(k).c_str(), type_name(v).c_str(), shown.c_str());
  }
  for (const auto& t : f.tensors()) {
    std::string ne;
    for (auto d : t.ne) ne += (ne.empty() ? "" : " x ") + std::to_string(d);
    std::printf("  tensor %-40s %-6s [%s] offset %llu, %llu bytes\n", t.name.c_str(),
                io::ggml_type_info(static_cast<uint32_t>(t.type))->name, ne.c_str(),
                static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.nbytes));
  }
  return 0;
}

int gguf_dequant_main(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  const char* usage = "dflash gguf dequant FILE --tensor NAME --output OUT.f32";
  std::string file = take_file(args, usage);
  Args a("gguf dequant", std::string("write one tensor dequantised to raw little-endian float32\nusage: ") + usage);
  a.option("tensor", "NAME", "", "tensor name");
  a.option("output", "FILE", "", "where to write the float32 values (memory order, ne[0] fastest)");
  if (!a.parse(args)) return 0;
  if (a.given("output")) io::check_output_path(a.str("output"), "gguf dequant: --output");  // before any work
  if (a.str("tensor").empty() || a.str("output").empty())
    throw std::invalid_argument(std::string("--tensor and --output are required\nusage: ") + usage);
  auto f = io::GGUFFile::open(file);
  std::vector<float> v = f.dequantize(f.tensor(a.str("tensor")));
  io::write_file_atomically(a.str("output"),  // whole or absent, never a partial dump
                            std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return 0;
}

}  // namespace dflash::io
