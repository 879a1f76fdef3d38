// Torch-free part of the safetensors format: parsing and validating the JSON header, and
// building a header for writing. Layout: u64 little-endian header length N, N bytes of JSON,
// then the data section; each tensor's data_offsets are relative to the data section.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dflash::io {

struct SafetensorsEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range inside the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order (sorted by begin)
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // absolute file offset of the data section (8 + N)
  int64_t file_size = 0;
};

// Bytes per element of a safetensors dtype name; -1 when the name is not one we support.
int64_t safetensors_itemsize(const std::string& dtype);
// The supported names, comma separated (for error messages).
const char* safetensors_known_dtypes();

// Reads and validates the header of `path` (a regular file). Throws std::runtime_error naming the file, the
// tensor and the field on truncation, corrupt JSON, a duplicate name, unknown dtype, bad shape, offsets outside
// the data section, size mismatch, or tensors that do not cover the data section exactly: as the reference
// reader, the tensors sorted by offset must start at byte 0 of the data section, follow each other without a
// gap or an overlap, and end at its last byte (stray bytes anywhere would shift what other readers see).
SafetensorsHeader read_safetensors_header(const std::string& path);

// The same checks on a whole file held in memory (`size` bytes); `what` names the source in errors.
SafetensorsHeader parse_safetensors_bytes(const unsigned char* bytes, uint64_t size, const std::string& what);

// Validates an already-read header: `json_text` is the N header bytes, `data_size` the byte count
// after it. `what` names the source in errors.
SafetensorsHeader parse_safetensors_header(const std::string& json_text, int64_t data_size, const std::string& what);

// JSON header text, padded with spaces so the data section starts 8-byte aligned. Linear in the number of
// entries (checkpoints and feature shards hold hundreds of thousands of tensors).
std::string build_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata);

}  // namespace dflash::io
