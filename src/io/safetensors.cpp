#include "safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "atomic_output.h"
#include "input_file.h"
#include "strict_json.h"

namespace dflash::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Reads exactly n bytes at offset, or throws naming the file.
void pread_all(int fd, char* dst, int64_t n, int64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t got = ::pread(fd, dst, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw std::runtime_error("safetensors file '" + path + "': read failed at byte " + std::to_string(offset) +
                               (got == 0 ? " (file shrank?)" : ": " + errno_text()));
    dst += got;
    n -= got;
    offset += got;
  }
}

// Loading float weights from integer or bool data (or the other way) would cast silently: refuse it.
void check_cast(const std::string& where, const std::string& name, at::ScalarType stored, at::ScalarType want) {
  auto kind = [](at::ScalarType t) { return t == at::kBool ? 0 : at::isFloatingType(t) ? 2 : 1; };
  if (kind(stored) == kind(want)) return;
  throw std::runtime_error(where + ": tensor '" + name + "' is stored as " + scalar_to_safetensors_dtype(stored) +
                           ", expected a " + (kind(want) == 2 ? "floating-point dtype (F64, F32, F16, BF16)"
                                              : kind(want) == 1 ? "integer dtype" : "BOOL") +
                           " to load it as " + c10::toString(want));
}

}  // namespace

at::ScalarType safetensors_dtype_to_scalar(const std::string& d) {
  static const std::map<std::string, at::ScalarType> m = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  auto it = m.find(d);
  if (it == m.end())
    throw std::runtime_error("safetensors: dtype '" + d + "' is not supported (expected one of " +
                             safetensors_known_dtypes() + ")");
  return it->second;
}

std::string scalar_to_safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "F64";
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default:
      throw std::runtime_error(std::string("safetensors: cannot store dtype ") + c10::toString(t) +
                               " (expected one of " + safetensors_known_dtypes() + ")");
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.header_ = read_safetensors_header(path);
  for (size_t i = 0; i < f.header_.entries.size(); ++i) f.index_[f.header_.entries[i].name] = i;
  return f;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw std::runtime_error("safetensors file '" + path_ + "': no tensor named '" + name + "'");
  return header_.entries[it->second];
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& e : header_.entries) out.push_back(e.name);
  return out;
}

at::Tensor SafetensorsFile::load(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(safetensors_dtype_to_scalar(e.dtype)));
  const int64_t n = e.end - e.begin;
  if (n == 0) return t;
  std::unique_ptr<InputFile> in;
  try {
    in = std::make_unique<InputFile>(path_);
  } catch (const std::runtime_error& err) {
    throw std::runtime_error("safetensors file " + std::string(err.what()));
  }
  pread_all(in->fd(), static_cast<char*>(t.data_ptr()), n, header_.data_start + e.begin, path_);
  if (e.dtype == "BOOL") {
    // Any byte other than 0/1 would be an invalid bool in ATen; reject instead of misbehaving later.
    at::Tensor bytes = t.view(at::kByte);
    if (bytes.gt(1).any().item<bool>())
      throw std::runtime_error("safetensors file '" + path_ + "': tensor '" + name +
                               "' of dtype BOOL holds bytes other than 0 and 1");
  }
  return t;
}

at::Tensor SafetensorsFile::load(const std::string& name, at::ScalarType dtype) const {
  check_cast("safetensors file '" + path_ + "'", name, safetensors_dtype_to_scalar(entry(name).dtype), dtype);
  at::Tensor t = load(name);
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

at::Tensor SafetensorsFile::load_floating(const std::string& name) const {
  const at::ScalarType stored = safetensors_dtype_to_scalar(entry(name).dtype);
  check_cast("safetensors file '" + path_ + "'", name, stored, at::kFloat);
  return load(name);
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw std::runtime_error("safetensors: tensor '" + name + "' for '" + path + "' is undefined");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = scalar_to_safetensors_dtype(t.scalar_type());
    e.shape = t.sizes().vec();
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    e.begin = offset;
    e.end = offset + c.numel() * c.element_size();
    offset = e.end;
    entries.push_back(std::move(e));
    data.push_back(std::move(c));
  }
  const std::string header = build_safetensors_header(entries, metadata);
  AtomicOutputFile out(path);  // temporary beside `path`; removed again when anything below throws
  unsigned char len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(std::string_view(reinterpret_cast<const char*>(len), 8));
  out.write(header);
  for (const auto& c : data)
    out.write(std::string_view(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * c.element_size())));
  try {
    out.commit();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("safetensors: ") + e.what());
  }
}

SafetensorsFolder SafetensorsFolder::open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsFolder f;
  f.dir_ = dir;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      j = parse_json_strict(read_regular_file(index.string()));
    } catch (const JsonError& e) {
      throw std::runtime_error("safetensors index '" + index.string() + "': " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw std::runtime_error("safetensors index '" + index.string() +
                               "': field 'weight_map' is missing or not an object of name -> shard file");
    std::map<std::string, size_t> shard_index;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw std::runtime_error("safetensors index '" + index.string() + "': field 'weight_map." + it.key() +
                                 "' must be a shard file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..")
        throw std::runtime_error("safetensors index '" + index.string() + "': shard '" + shard +
                                 "' must be a plain file name inside the folder");
      auto s = shard_index.find(shard);
      if (s == shard_index.end()) {
        s = shard_index.emplace(shard, f.files_.size()).first;
        f.files_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open((fs::path(dir) / shard).string())));
      }
      if (!f.files_[s->second]->contains(it.key()))
        throw std::runtime_error("safetensors index '" + index.string() + "': tensor '" + it.key() +
                                 "' is mapped to '" + shard + "' which does not contain it");
      f.where_[it.key()] = s->second;
    }
  } else if (fs::exists(single)) {
    f.files_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open(single.string())));
    for (const auto& e : f.files_[0]->entries()) f.where_[e.name] = 0;
  } else {
    throw std::runtime_error("safetensors folder '" + dir +
                             "': neither model.safetensors nor model.safetensors.index.json exists");
  }
  return f;
}

at::Tensor SafetensorsFolder::load(const std::string& name) const { return file_of(name).load(name); }

const SafetensorsFile& SafetensorsFolder::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw std::runtime_error("safetensors folder '" + dir_ + "': no tensor named '" + name + "'");
  return *files_[it->second];
}

at::Tensor SafetensorsFolder::load(const std::string& name, at::ScalarType dtype) const {
  return file_of(name).load(name, dtype);
}

at::Tensor SafetensorsFolder::load_floating(const std::string& name) const { return file_of(name).load_floating(name); }

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : where_) out.push_back(n);
  return out;
}

}  // namespace dflash::io
