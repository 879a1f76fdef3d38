// GGUF reader (llama.cpp's model file format, versions 2 and 3): header, metadata key/values of every
// type, tensor infos and the data section, memory-mapped read-only. Every count, length and offset is
// checked against the file before use, so a corrupt or truncated file throws std::runtime_error naming
// the file and the field, never reads out of bounds. Framework-free: no torch here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dflash::io {

enum class GGUFValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GGUFValueType t);

// One metadata value: a compact view into the mapped file (valid while its GGUFFile lives). Nothing is copied,
// so an array costs a few bytes here whatever its length (plus 8 bytes per element for arrays of strings and
// 16 for arrays of arrays, to reach element k directly): memory stays within a small factor of the file size.
class GGUFValue {
 public:
  GGUFValueType type() const { return type_; }
  GGUFValueType elem_type() const { return elem_type_; }  // ARRAY only
  bool is_integer() const;
  bool is_array() const { return type_ == GGUFValueType::ARRAY; }

  // Scalars, by type: u() for UINT*, i() for INT* (and every integer that fits in int64), f() for FLOAT*, b()
  // for BOOL, s() for STRING.
  uint64_t u() const { return bits_; }
  int64_t i() const { return static_cast<int64_t>(bits_); }
  double f() const;
  bool b() const { return bits_ != 0; }
  std::string_view s() const { return {reinterpret_cast<const char*>(data_), static_cast<size_t>(count_)}; }

  // ARRAY: element count, and element k decoded (a scalar, or a nested array's view); throws out_of_range.
  uint64_t size() const { return count_; }
  GGUFValue item(uint64_t k) const;

 private:
  friend class GGUFFile;
  friend struct GGUFParser;
  GGUFValueType type_ = GGUFValueType::UINT8;
  GGUFValueType elem_type_ = GGUFValueType::UINT8;
  uint64_t bits_ = 0;                  // integers (signed ones sign-extended), the double's bits, the bool
  const uint8_t* data_ = nullptr;      // STRING: its bytes; ARRAY: the first element
  uint64_t count_ = 0;                 // STRING: length in bytes; ARRAY: elements
  const uint64_t* offsets_ = nullptr;  // ARRAY of STRING: offset of element k from data_; of ARRAY: (offset,
                                       // distance from offsets_ to the child's offsets) per element
};

// ggml tensor element types (the numbering of ggml.h).
enum class GGMLType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35,
  MXFP4 = 39,
};

struct GGMLTypeInfo {
  const char* name;
  uint32_t block_elems;  // elements per block
  uint32_t block_bytes;  // bytes per block
  bool dequantizable;    // dequantize() supports it
};
// nullptr for a type number this reader does not know.
const GGMLTypeInfo* ggml_type_info(uint32_t type);

struct GGUFTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order: ne[0] is the fastest-varying (contiguous) dimension
  GGMLType type = GGMLType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  uint64_t numel() const;
  // Row-major shape as PyTorch/NumPy see the same memory: ne reversed.
  std::vector<int64_t> shape() const;
};

class GGUFFile {
 public:
  // Maps and parses `path` (a regular file); throws std::runtime_error("<path>: <field>: <problem>") on any defect.
  static GGUFFile open(const std::string& path);
  // Parses a copy of `size` bytes held in memory; `name` stands for the path in errors (fuzz targets, tests).
  static GGUFFile from_bytes(const std::string& name, const uint8_t* data, size_t size);
  GGUFFile(GGUFFile&&) noexcept;
  GGUFFile& operator=(GGUFFile&&) noexcept;
  ~GGUFFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order (keys are views into the mapping), and lookup by key.
  const std::vector<std::pair<std::string_view, GGUFValue>>& metadata() const { return kv_; }
  const GGUFValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: throw naming the key when it is missing or of another type.
  const GGUFValue& get(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // any integer type that fits in int64
  // An integer that must lie in [lo, hi] (a count or size about to be narrowed): throws naming the key and
  // the value as stored otherwise.
  int64_t get_int(const std::string& key, int64_t lo, int64_t hi) const;
  double get_float(const std::string& key) const;  // FLOAT32/FLOAT64
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;

  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
  const GGUFTensorInfo* find_tensor(const std::string& name) const;
  const GGUFTensorInfo& tensor(const std::string& name) const;  // throws when absent
  // The raw bytes of a tensor inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const GGUFTensorInfo& t) const { return base_ + data_offset_ + t.offset; }

  // Dequantises to float32 in memory order (numel() values): F32/F16/BF16/F64/I8-I64, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
  // Q2_K..Q6_K; throws for the other (IQ*, TQ*, MXFP4, Q8_1/Q8_K) types.
  std::vector<float> dequantize(const GGUFTensorInfo& t) const;

 private:
  GGUFFile() = default;
  void parse();
  void release();
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap (else owned_ holds the bytes)
  std::unique_ptr<uint8_t[]> owned_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GGUFValue>> kv_;
  std::vector<uint64_t> offsets_;     // element offsets of arrays of strings / arrays (see GGUFValue)
  std::vector<uint32_t> kv_sorted_;   // kv_ indices sorted by key
  std::vector<GGUFTensorInfo> tensors_;
  std::vector<uint32_t> tensors_sorted_;  // tensors_ indices sorted by name
};

// Dequantises `n` elements of `type` from `src` (n must be a multiple of the block size) into `dst`.
// Exposed on its own so tests and the torch bridge can use it on any buffer.
void ggml_dequantize(GGMLType type, const uint8_t* src, float* dst, uint64_t n);

float fp16_to_fp32(uint16_t h);
float bf16_to_fp32(uint16_t h);

}  // namespace dflash::io
