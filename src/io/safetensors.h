// Reading and writing safetensors files (single files and sharded Hugging Face folders) as ATen tensors.
// Every file is validated on open (see safetensors_header.h); loads return CPU tensors.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "safetensors_header.h"

namespace dflash::io {

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming the file when absent
  std::vector<std::string> names() const;                         // in data order

  // Thread-safe: each call reads with its own file descriptor.
  at::Tensor load(const std::string& name) const;  // CPU tensor, the stored dtype
  // Converted to `dtype`; throws when that would cross between floating-point, integer and bool data
  // (integer weights must not become float weights without a word).
  at::Tensor load(const std::string& name, at::ScalarType dtype) const;
  // The stored dtype, which must be floating-point (weights); throws naming the tensor and its dtype otherwise.
  at::Tensor load_floating(const std::string& name) const;

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// Writes `tensors` (any device/layout; copied to contiguous CPU) atomically: a temporary file in the same
// folder ("<path>.tmp.<pid>", see atomic_output.h), fsync, then rename over `path`. Names must be unique; dtypes must be safetensors-representable.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A Hugging Face weight folder: `model.safetensors`, or `model.safetensors.index.json` + the shards it names.
class SafetensorsFolder {
 public:
  static SafetensorsFolder open(const std::string& dir);
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  at::Tensor load(const std::string& name) const;  // stored dtype, CPU
  at::Tensor load(const std::string& name, at::ScalarType dtype) const;  // as SafetensorsFile::load
  at::Tensor load_floating(const std::string& name) const;              // as SafetensorsFile::load_floating
  std::vector<std::string> names() const;          // sorted
  const std::string& dir() const { return dir_; }

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

at::ScalarType safetensors_dtype_to_scalar(const std::string& dtype);  // throws on unknown names
std::string scalar_to_safetensors_dtype(at::ScalarType t);              // throws on unrepresentable types

}  // namespace dflash::io
