#include "safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dflash::io {
namespace {

// The pip package refuses headers above 100 MB; anything larger is corrupt in practice.
constexpr int64_t kMaxHeaderBytes = 100LL * 1024 * 1024;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error("safetensors " + what + ": " + msg);
}

std::string tensor_ctx(const std::string& name) { return "tensor '" + name + "'"; }

int64_t read_int(const nlohmann::json& v, const std::string& what, const std::string& ctx) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(what, ctx + " is too large");
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  fail(what, ctx + " must be an integer, got " + v.dump());
}

}  // namespace

int64_t safetensors_itemsize(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? -1 : it->second;
}

const char* safetensors_known_dtypes() { return "F64,F32,F16,BF16,I64,I32,I16,I8,U8,BOOL"; }

SafetensorsHeader parse_safetensors_header(const std::string& json_text, int64_t data_size,
                                           const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(what, "header must be a JSON object, got " + std::string(j.type_name()));

  SafetensorsHeader h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(what, "field '__metadata__' must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(what, "field '__metadata__." + m.key() + "' must be a string, got " + m.value().dump());
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string ctx = tensor_ctx(name);
    if (!v.is_object()) fail(what, ctx + " must be an object with dtype, shape, data_offsets");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) fail(what, ctx + " is missing field '" + field + "'");

    SafetensorsEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) fail(what, ctx + " field 'dtype' must be a string");
    e.dtype = v["dtype"].get<std::string>();
    const int64_t itemsize = safetensors_itemsize(e.dtype);
    if (itemsize < 0)
      fail(what, ctx + " field 'dtype' is '" + e.dtype + "' (expected one of " + safetensors_known_dtypes() + ")");

    if (!v["shape"].is_array()) fail(what, ctx + " field 'shape' must be an array");
    int64_t numel = 1;
    bool overflow = false;
    for (const auto& d : v["shape"]) {
      int64_t n = read_int(d, what, ctx + " field 'shape' entry");
      if (n < 0) fail(what, ctx + " field 'shape' has negative dimension " + std::to_string(n));
      e.shape.push_back(n);
      if (n != 0 && numel > std::numeric_limits<int64_t>::max() / n / itemsize) overflow = true;
      numel *= n;
    }
    if (overflow) fail(what, ctx + " field 'shape' is too large");

    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail(what, ctx + " field 'data_offsets' must be [begin, end]");
    e.begin = read_int(off[0], what, ctx + " field 'data_offsets[0]'");
    e.end = read_int(off[1], what, ctx + " field 'data_offsets[1]'");
    if (e.begin < 0 || e.end < e.begin)
      fail(what, ctx + " field 'data_offsets' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] is not an increasing non-negative range");
    if (e.end > data_size)
      fail(what, ctx + " field 'data_offsets' end " + std::to_string(e.end) + " is past the data section (" +
                     std::to_string(data_size) + " bytes; file truncated?)");
    const int64_t expected = numel * itemsize;
    if (e.end - e.begin != expected)
      fail(what, ctx + " field 'data_offsets' spans " + std::to_string(e.end - e.begin) +
                     " bytes, expected " + std::to_string(expected) + " (numel * itemsize of " + e.dtype + ")");
    h.entries.push_back(std::move(e));
  }

  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < h.entries.size(); ++i) {
    const auto& p = h.entries[i - 1];
    const auto& c = h.entries[i];
    // Empty tensors occupy no bytes and may share an offset with anything.
    if (c.begin < p.end && c.end > c.begin)
      fail(what, tensor_ctx(c.name) + " field 'data_offsets' [" + std::to_string(c.begin) + ", " +
                     std::to_string(c.end) + "] overlaps " + tensor_ctx(p.name) + " [" + std::to_string(p.begin) +
                     ", " + std::to_string(p.end) + "]");
  }
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const std::string what = "file '" + path + "'";
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(what, "cannot open for reading");
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  if (file_size < 8)
    fail(what, "is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length (truncated?)");
  f.seekg(0);
  unsigned char len_bytes[8];
  f.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little endian on every host
  if (n > static_cast<uint64_t>(kMaxHeaderBytes))
    fail(what, "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeaderBytes) +
                   "-byte limit (corrupt file?)");
  if (static_cast<int64_t>(n) > file_size - 8)
    fail(what, "header length " + std::to_string(n) + " is past the end of the " + std::to_string(file_size) +
                   "-byte file (truncated?)");
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  if (!f) fail(what, "read of the header failed");
  SafetensorsHeader h = parse_safetensors_header(text, file_size - 8 - static_cast<int64_t>(n), what);
  h.data_start = 8 + static_cast<int64_t>(n);
  h.file_size = file_size;
  return h;
}

std::string build_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  for (const auto& e : entries) {
    if (e.name == "__metadata__") throw std::runtime_error("safetensors: tensor name '__metadata__' is reserved");
    if (j.contains(e.name)) throw std::runtime_error("safetensors: duplicate tensor name '" + e.name + "'");
    j[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = j.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

}  // namespace dflash::io
