#include "safetensors_header.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "input_file.h"
#include "strict_json.h"

namespace dflash::io {
namespace {

// The pip package refuses headers above 100 MB; anything larger is corrupt in practice.
constexpr int64_t kMaxHeaderBytes = 100LL * 1024 * 1024;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error("safetensors " + what + ": " + msg);
}

std::string tensor_ctx(const std::string& name) { return "tensor '" + name + "'"; }

int64_t read_int(const nlohmann::json& v, const std::string& what, const std::string& ctx) {
  if (auto n = json_integer_in(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) return *n;
  if (v.is_number_integer()) fail(what, ctx + " is " + json_shown(v) + ", too large");
  fail(what, ctx + " must be an integer, got " + json_shown(v));
}

std::string range_str(const SafetensorsEntry& e) {
  std::string s = "[";  // appended step by step: GCC 12 warns (-Wrestrict, a false positive) on "[" + to_string
  s += std::to_string(e.begin);
  s += ", ";
  s += std::to_string(e.end);
  return s + "]";
}

// The 8-byte little-endian header length, checked against the file size.
uint64_t header_length(const unsigned char* len_bytes, int64_t file_size, const std::string& what) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little endian on every host
  if (n > static_cast<uint64_t>(kMaxHeaderBytes))
    fail(what, "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeaderBytes) +
                   "-byte limit (corrupt file?)");
  if (static_cast<int64_t>(n) > file_size - 8)
    fail(what, "header length " + std::to_string(n) + " is past the end of the " + std::to_string(file_size) +
                   "-byte file (truncated?)");
  return n;
}

void check_file_size(int64_t file_size, const std::string& what) {
  if (file_size < 8)
    fail(what, "is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length (truncated?)");
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
  // As the reference reader: the header is a JSON object from its first byte (only trailing padding).
  if (json_text.empty() || json_text[0] != '{')
    fail(what, "header must start with '{' (a JSON object), found " +
                   (json_text.empty() ? std::string("nothing") : "byte " + std::to_string(uint8_t(json_text[0]))) +
                   " (header length wrong or not a safetensors file?)");
  nlohmann::json j;
  try {
    j = parse_json_strict(json_text);
  } catch (const JsonError& e) {
    fail(what, std::string("header: ") + e.what());
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
          fail(what, "field '__metadata__." + m.key() + "' must be a string, got " + json_shown(m.value()));
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
    bool overflow = false, empty = false;
    for (const auto& d : v["shape"]) {
      int64_t n = read_int(d, what, ctx + " field 'shape' entry");
      if (n < 0) fail(what, ctx + " field 'shape' has negative dimension " + std::to_string(n));
      e.shape.push_back(n);
      if (n == 0) empty = true;
      else if (!overflow && __builtin_mul_overflow(numel, n, &numel)) overflow = true;
    }
    // A dimension of 0 after huge ones still gives a valid empty tensor.
    if (empty) numel = 0;
    else if (overflow || numel > std::numeric_limits<int64_t>::max() / itemsize)
      fail(what, ctx + " field 'shape' is too large");

    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail(what, ctx + " field 'data_offsets' must be [begin, end]");
    e.begin = read_int(off[0], what, ctx + " field 'data_offsets[0]'");
    e.end = read_int(off[1], what, ctx + " field 'data_offsets[1]'");
    if (e.begin < 0 || e.end < e.begin)
      fail(what, ctx + " field 'data_offsets' " + range_str(e) + " is not an increasing non-negative range");
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
  // Exact cover: each tensor starts where the previous one ended (empty tensors occupy no bytes there).
  int64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& c : h.entries) {
    if (c.begin > cursor)
      fail(what, tensor_ctx(c.name) + " field 'data_offsets' " + range_str(c) + " leaves a gap of " +
                     std::to_string(c.begin - cursor) + " unused bytes at data offset " + std::to_string(cursor) +
                     (prev ? " after " + tensor_ctx(prev->name) + " " + range_str(*prev)
                           : std::string(" (the first tensor must start at 0)")));
    if (c.begin < cursor)
      fail(what, tensor_ctx(c.name) + " field 'data_offsets' " + range_str(c) + " overlaps " +
                     (prev ? tensor_ctx(prev->name) + " " + range_str(*prev) : std::string("another tensor")));
    cursor = c.end;
    prev = &c;
  }
  if (cursor != data_size)
    fail(what, "the data section has " + std::to_string(data_size - cursor) + " trailing bytes after " +
                   (prev ? tensor_ctx(prev->name) + " " + range_str(*prev) : std::string("the header (no tensors)")) +
                   ": the header length or data_offsets are wrong");
  return h;
}

SafetensorsHeader parse_safetensors_bytes(const unsigned char* bytes, uint64_t size, const std::string& what) {
  const int64_t file_size = static_cast<int64_t>(size);
  check_file_size(file_size, what);
  const uint64_t n = header_length(bytes, file_size, what);
  const std::string text(reinterpret_cast<const char*>(bytes) + 8, n);
  SafetensorsHeader h = parse_safetensors_header(text, file_size - 8 - static_cast<int64_t>(n), what);
  h.data_start = 8 + static_cast<int64_t>(n);
  h.file_size = file_size;
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const std::string what = "file '" + path + "'";
  std::unique_ptr<InputFile> f;
  try {
    f = std::make_unique<InputFile>(path);
  } catch (const std::runtime_error& e) {
    fail(what, e.what());
  }
  const int64_t file_size = static_cast<int64_t>(f->size());
  check_file_size(file_size, what);
  auto pread_exact = [&](char* dst, size_t n, int64_t offset) {
    while (n > 0) {
      const ssize_t got = ::pread(f->fd(), dst, n, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        fail(what, "read of the header failed at byte " + std::to_string(offset) +
                       (got == 0 ? std::string(" (file shrank?)") : ": " + std::string(std::strerror(errno))));
      dst += got;
      n -= static_cast<size_t>(got);
      offset += got;
    }
  };
  unsigned char len_bytes[8];
  pread_exact(reinterpret_cast<char*>(len_bytes), 8, 0);
  const uint64_t n = header_length(len_bytes, file_size, what);
  std::string text(n, '\0');
  pread_exact(text.data(), n, 8);
  SafetensorsHeader h = parse_safetensors_header(text, file_size - 8 - static_cast<int64_t>(n), what);
  h.data_start = 8 + static_cast<int64_t>(n);
  h.file_size = file_size;
  return h;
}

std::string build_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata) {
  // Written by hand, not through an ordered JSON object: its key lookups are linear, which made the writer
  // quadratic in the number of tensors.
  auto quoted = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::unordered_set<std::string_view> seen;
  seen.reserve(entries.size());
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) text += ',';
      text += quoted(k);
      text += ':';
      text += quoted(v);
      first = false;
    }
    text += "}";
  }
  for (const auto& e : entries) {
    if (e.name == "__metadata__") throw std::runtime_error("safetensors: tensor name '__metadata__' is reserved");
    if (!seen.insert(e.name).second) throw std::runtime_error("safetensors: duplicate tensor name '" + e.name + "'");
    if (text.size() > 1) text += ',';
    text += quoted(e.name);
    text += ":{\"dtype\":\"";
    text += e.dtype;
    text += "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) {
      if (i) text += ',';
      text += std::to_string(e.shape[i]);
    }
    text += "],\"data_offsets\":[";
    text += std::to_string(e.begin);
    text += ',';
    text += std::to_string(e.end);
    text += "]}";
  }
  text += "}";
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

}  // namespace dflash::io
