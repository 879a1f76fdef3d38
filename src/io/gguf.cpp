#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "input_file.h"

namespace dflash::io {

namespace {

constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyBytes = 65535;  // the spec limits keys to 2^16-1 bytes
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are surely corrupt

std::string describe_key(std::string_view key) { return "metadata '" + std::string(key) + "'"; }

// Bounds-checked little-endian reads over the mapped file; errors name the file and the field.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size) : path_(path), base_(base), size_(size) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::runtime_error(path_ + ": " + field + ": " + what);
  }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  void skip(uint64_t n) { pos_ += n; }  // after need(n)

  void need(uint64_t n, const std::string& field) const {
    if (n > remaining())
      fail(field, "needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                      " but the file ends at " + std::to_string(size_) + " (truncated?)");
  }
  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const std::string& field, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    uint64_t n = read<uint64_t>(field + " (string length)");
    if (n > max_len) fail(field, "string length " + std::to_string(n) + " exceeds the limit " + std::to_string(max_len));
    if (n > remaining())
      fail(field, "string of " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                      " runs past end of file (size " + std::to_string(size_) + ")");
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }
  // Rejects a count that could not possibly fit in the rest of the file before anything is allocated.
  void check_count(uint64_t count, uint64_t min_bytes_each, const std::string& field) const {
    if (min_bytes_each && count > remaining() / min_bytes_each)
      fail(field, "count " + std::to_string(count) + " cannot fit in the " + std::to_string(remaining()) +
                      " bytes left in the file (at least " + std::to_string(min_bytes_each) + " bytes each)");
  }

 private:
  std::string path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

uint64_t scalar_bytes(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::BOOL: return 1;
    case GGUFValueType::UINT16: case GGUFValueType::INT16: return 2;
    case GGUFValueType::UINT32: case GGUFValueType::INT32: case GGUFValueType::FLOAT32: return 4;
    case GGUFValueType::UINT64: case GGUFValueType::INT64: case GGUFValueType::FLOAT64: return 8;
    case GGUFValueType::STRING: return 8;  // at least the length
    case GGUFValueType::ARRAY: return 12;  // at least element type + count
  }
  return 0;
}

bool fixed_size(GGUFValueType t) { return t != GGUFValueType::STRING && t != GGUFValueType::ARRAY; }

GGUFValueType read_value_type(Cursor& c, const std::string& field) {
  uint32_t t = c.read<uint32_t>(field + " (value type)");
  if (t > static_cast<uint32_t>(GGUFValueType::FLOAT64))
    c.fail(field, "unknown value type " + std::to_string(t) + " (expected 0..12)");
  return static_cast<GGUFValueType>(t);
}

// The scalar payload of a fixed-size value at `p` (already bounds-checked): integers sign- or zero-extended
// to 64 bits, floats as the bits of a double.
uint64_t scalar_bits(GGUFValueType t, const uint8_t* p) {
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case GGUFValueType::UINT8: case GGUFValueType::BOOL: return get(uint8_t{});
    case GGUFValueType::INT8: return static_cast<uint64_t>(static_cast<int64_t>(get(int8_t{})));
    case GGUFValueType::UINT16: return get(uint16_t{});
    case GGUFValueType::INT16: return static_cast<uint64_t>(static_cast<int64_t>(get(int16_t{})));
    case GGUFValueType::UINT32: return get(uint32_t{});
    case GGUFValueType::INT32: return static_cast<uint64_t>(static_cast<int64_t>(get(int32_t{})));
    case GGUFValueType::UINT64: return get(uint64_t{});
    case GGUFValueType::INT64: return static_cast<uint64_t>(get(int64_t{}));
    case GGUFValueType::FLOAT32: {
      const double d = get(float{});
      uint64_t b;
      std::memcpy(&b, &d, 8);
      return b;
    }
    case GGUFValueType::FLOAT64: return get(uint64_t{});
    default: return 0;
  }
}

}  // namespace

// Reads values into compact views; array element offsets go to `offsets` (indices kept until parse ends).
struct GGUFParser {
  Cursor& c;
  const uint8_t* base;
  std::vector<uint64_t>& offsets;

  // Validates the value of `type` at the cursor and moves past it. For arrays of variable-size elements,
  // `*pool_at` receives where their offsets start in `offsets`.
  GGUFValue read(GGUFValueType type, const std::string& field, int depth, uint64_t* pool_at) {
    GGUFValue v;
    v.type_ = type;
    if (fixed_size(type)) {
      c.need(scalar_bytes(type), field);
      v.bits_ = scalar_bits(type, base + c.pos());
      if (type == GGUFValueType::BOOL && v.bits_ > 1)
        c.fail(field, "bool value " + std::to_string(v.bits_) + " (expected 0 or 1)");
      c.skip(scalar_bytes(type));
      return v;
    }
    if (type == GGUFValueType::STRING) {
      const uint64_t n = c.read<uint64_t>(field + " (string length)");
      if (n > c.remaining())
        c.fail(field, "string of " + std::to_string(n) + " bytes at offset " + std::to_string(c.pos()) +
                          " runs past end of file (size " + std::to_string(c.size()) + ")");
      v.data_ = base + c.pos();
      v.count_ = n;
      c.skip(n);
      return v;
    }
    if (depth >= kMaxArrayDepth) c.fail(field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    v.elem_type_ = read_value_type(c, field + " (array element type)");
    const uint64_t n = c.read<uint64_t>(field + " (array length)");
    c.check_count(n, scalar_bytes(v.elem_type_), field + " (array length)");
    v.count_ = n;
    v.data_ = base + c.pos();
    const uint64_t start = c.pos();
    auto elem = [&](uint64_t k) { return field + "[" + std::to_string(k) + "]"; };  // built on errors only
    if (fixed_size(v.elem_type_)) {
      const uint64_t w = scalar_bytes(v.elem_type_);
      c.need(n * w, field + " (array data)");
      if (v.elem_type_ == GGUFValueType::BOOL)
        for (uint64_t k = 0; k < n; ++k)
          if (v.data_[k] > 1) c.fail(elem(k), "bool value " + std::to_string(v.data_[k]) + " (expected 0 or 1)");
      c.skip(n * w);
      return v;
    }
    const uint64_t begin = offsets.size();
    *pool_at = begin;
    if (v.elem_type_ == GGUFValueType::STRING) {
      offsets.resize(begin + n);
      for (uint64_t k = 0; k < n; ++k) {
        offsets[begin + k] = c.pos() - start;
        if (c.remaining() < 8) read(GGUFValueType::STRING, elem(k), depth + 1, nullptr);  // throws the error
        uint64_t len;
        std::memcpy(&len, base + c.pos(), 8);
        if (len > c.remaining() - 8) read(GGUFValueType::STRING, elem(k), depth + 1, nullptr);
        c.skip(8 + len);
      }
      return v;
    }
    offsets.resize(begin + 2 * n);
    for (uint64_t k = 0; k < n; ++k) {
      offsets[begin + 2 * k] = c.pos() - start;
      uint64_t child_at = 0;
      const GGUFValue child = read(GGUFValueType::ARRAY, elem(k), depth + 1, &child_at);
      offsets[begin + 2 * k + 1] = fixed_size(child.elem_type_) ? 0 : child_at - begin;
    }
    return v;
  }
};

const char* gguf_value_type_name(GGUFValueType t) {
  static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "?";
}

bool GGUFValue::is_integer() const {
  switch (type_) {
    case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::UINT16: case GGUFValueType::INT16:
    case GGUFValueType::UINT32: case GGUFValueType::INT32: case GGUFValueType::UINT64: case GGUFValueType::INT64:
      return true;
    default:
      return false;
  }
}

const GGMLTypeInfo* ggml_type_info(uint32_t type) {
  struct Entry {
    uint32_t id;
    GGMLTypeInfo info;
  };
  static const Entry table[] = {
      {0, {"F32", 1, 4, true}},        {1, {"F16", 1, 2, true}},         {2, {"Q4_0", 32, 18, true}},
      {3, {"Q4_1", 32, 20, true}},     {6, {"Q5_0", 32, 22, true}},      {7, {"Q5_1", 32, 24, true}},
      {8, {"Q8_0", 32, 34, true}},     {9, {"Q8_1", 32, 40, false}},     {10, {"Q2_K", 256, 84, true}},
      {11, {"Q3_K", 256, 110, true}}, {12, {"Q4_K", 256, 144, true}},  {13, {"Q5_K", 256, 176, true}},
      {14, {"Q6_K", 256, 210, true}}, {15, {"Q8_K", 256, 292, false}},  {16, {"IQ2_XXS", 256, 66, false}},
      {17, {"IQ2_XS", 256, 74, false}}, {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
      {20, {"IQ4_NL", 32, 18, false}}, {21, {"IQ3_S", 256, 110, false}}, {22, {"IQ2_S", 256, 82, false}},
      {23, {"IQ4_XS", 256, 136, false}}, {24, {"I8", 1, 1, true}},        {25, {"I16", 1, 2, true}},
      {26, {"I32", 1, 4, true}},       {27, {"I64", 1, 8, true}},        {28, {"F64", 1, 8, true}},
      {29, {"IQ1_M", 256, 56, false}}, {30, {"BF16", 1, 2, true}},       {34, {"TQ1_0", 256, 54, false}},
      {35, {"TQ2_0", 256, 66, false}}, {39, {"MXFP4", 32, 17, false}},
  };
  for (const auto& e : table)
    if (e.id == type) return &e.info;
  return nullptr;
}

uint64_t GGUFTensorInfo::numel() const {
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

std::vector<int64_t> GGUFTensorInfo::shape() const {
  return std::vector<int64_t>(ne.rbegin(), ne.rend());
}

double GGUFValue::f() const {
  double d;
  std::memcpy(&d, &bits_, 8);
  return d;
}

GGUFValue GGUFValue::item(uint64_t k) const {
  if (!is_array()) throw std::logic_error("GGUFValue::item on a non-array");
  if (k >= count_) throw std::out_of_range("GGUF array index " + std::to_string(k) + " of " + std::to_string(count_));
  GGUFValue v;
  v.type_ = elem_type_;
  if (fixed_size(elem_type_)) {
    v.bits_ = scalar_bits(elem_type_, data_ + k * scalar_bytes(elem_type_));
  } else if (elem_type_ == GGUFValueType::STRING) {
    const uint8_t* p = data_ + offsets_[k];
    std::memcpy(&v.count_, p, 8);
    v.data_ = p + 8;
  } else {
    const uint8_t* p = data_ + offsets_[2 * k];
    uint32_t et;
    std::memcpy(&et, p, 4);
    v.elem_type_ = static_cast<GGUFValueType>(et);
    std::memcpy(&v.count_, p + 4, 8);
    v.data_ = p + 12;
    v.offsets_ = fixed_size(v.elem_type_) ? nullptr : offsets_ + offsets_[2 * k + 1];
  }
  return v;
}

GGUFFile GGUFFile::open(const std::string& path) {
  GGUFFile f;
  f.path_ = path;
  std::unique_ptr<InputFile> in;
  try {
    in = std::make_unique<InputFile>(path);  // refuses FIFOs, devices and directories
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(e.what());
  }
  f.size_ = in->size();
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, in->fd(), 0);
    if (p == MAP_FAILED) throw std::runtime_error(path + ": cannot mmap: " + std::strerror(errno));
    f.base_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  }
  in.reset();
  f.parse();  // on throw, f's destructor unmaps
  return f;
}

GGUFFile GGUFFile::from_bytes(const std::string& name, const uint8_t* data, size_t size) {
  GGUFFile f;
  f.path_ = name;
  f.owned_ = std::make_unique<uint8_t[]>(size ? size : 1);
  if (size) std::memcpy(f.owned_.get(), data, size);
  f.base_ = f.owned_.get();
  f.size_ = size;
  f.parse();
  return f;
}

void GGUFFile::release() {
  if (mapped_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  base_ = nullptr;
  mapped_ = false;
  owned_.reset();
}

GGUFFile::GGUFFile(GGUFFile&& o) noexcept { *this = std::move(o); }

GGUFFile& GGUFFile::operator=(GGUFFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    base_ = o.base_;  // the mapping (or owned buffer) stays where it is, so views into it stay valid
    size_ = o.size_;
    mapped_ = o.mapped_;
    owned_ = std::move(o.owned_);
    version_ = o.version_;
    alignment_ = o.alignment_;
    data_offset_ = o.data_offset_;
    kv_ = std::move(o.kv_);
    offsets_ = std::move(o.offsets_);  // the heap buffer moves with it: GGUFValue::offsets_ stay valid
    kv_sorted_ = std::move(o.kv_sorted_);
    tensors_ = std::move(o.tensors_);
    tensors_sorted_ = std::move(o.tensors_sorted_);
    o.base_ = nullptr;
    o.size_ = 0;
    o.mapped_ = false;
  }
  return *this;
}

GGUFFile::~GGUFFile() { release(); }

void GGUFFile::parse() {
  Cursor c(path_, base_, size_);
  c.need(4, "magic");
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    std::string got;
    for (int k = 0; k < 4; ++k) {
      char ch = static_cast<char>(base_[k]);
      static const char hex[] = "0123456789abcdef";
      if (ch >= 32 && ch < 127) got += ch;
      else got += std::string("\\x") + hex[base_[k] >> 4] + hex[base_[k] & 15];
    }
    c.fail("magic", "expected \"GGUF\", found \"" + got + "\" (not a GGUF file)");
  }
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    if (version_ == 1) c.fail("version", "GGUF version 1 is not supported (expected 2 or 3)");
    uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) c.fail("version", "big-endian GGUF is not supported (expected little-endian)");
    c.fail("version", "unsupported version " + std::to_string(version_) + " (expected 2 or 3)");
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  uint64_t n_kv = c.read<uint64_t>("kv_count");
  // Smallest possible entries: a key/value is 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes,
  // a tensor info 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
  c.check_count(n_kv, 14, "kv_count");
  c.check_count(n_tensors, 24, "tensor_count");
  if (n_kv > std::numeric_limits<uint32_t>::max() || n_tensors > std::numeric_limits<uint32_t>::max())
    c.fail("kv_count", "more than 2^32-1 entries are not supported");

  // Array element offsets are collected as indices first (the vector grows); views get pointers at the end.
  std::vector<std::pair<size_t, uint64_t>> pools;  // (kv index, start in offsets_)
  GGUFParser parser{c, base_, offsets_};
  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string field = "metadata entry " + std::to_string(k);
    std::string_view key = c.read_string(field + " key", kMaxKeyBytes);
    if (key.empty()) c.fail(field, "empty key");
    GGUFValueType t = read_value_type(c, describe_key(key));
    uint64_t pool_at = 0;
    GGUFValue v = parser.read(t, describe_key(key), 0, &pool_at);
    if (v.is_array() && !fixed_size(v.elem_type_)) pools.emplace_back(kv_.size(), pool_at);
    kv_.emplace_back(key, v);
  }
  for (const auto& [i, at] : pools) kv_[i].second.offsets_ = offsets_.data() + at;
  kv_sorted_.resize(kv_.size());
  for (size_t i = 0; i < kv_.size(); ++i) kv_sorted_[i] = static_cast<uint32_t>(i);
  std::stable_sort(kv_sorted_.begin(), kv_sorted_.end(),
                   [&](uint32_t a, uint32_t b) { return kv_[a].first < kv_[b].first; });
  for (size_t i = 1; i < kv_sorted_.size(); ++i)
    if (kv_[kv_sorted_[i]].first == kv_[kv_sorted_[i - 1]].first)
      c.fail(describe_key(kv_[kv_sorted_[i]].first), "duplicate key");

  if (const GGUFValue* a = find("general.alignment")) {
    if (a->type() != GGUFValueType::UINT32)
      c.fail("metadata 'general.alignment'", std::string("type ") + gguf_value_type_name(a->type()) + " (expected UINT32)");
    if (a->u() == 0 || (a->u() & (a->u() - 1)) != 0)
      c.fail("metadata 'general.alignment'", "value " + std::to_string(a->u()) + " is not a power of two");
    alignment_ = a->u();
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    std::string field = "tensor info " + std::to_string(k);
    GGUFTensorInfo t;
    t.name = std::string(c.read_string(field + " name", kMaxKeyBytes));
    std::string tf = "tensor '" + t.name + "'";
    uint32_t nd = c.read<uint32_t>(tf + " n_dims");
    if (nd == 0 || nd > kMaxDims)
      c.fail(tf, "n_dims " + std::to_string(nd) + " (expected 1.." + std::to_string(kMaxDims) + ")");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t n = c.read<uint64_t>(tf + " dim " + std::to_string(d));
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (n != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n))
        c.fail(tf, "dim " + std::to_string(d) + " = " + std::to_string(n) + " makes the element count overflow");
      numel *= n;
      t.ne.push_back(n);
    }
    uint32_t type = c.read<uint32_t>(tf + " type");
    const GGMLTypeInfo* ti = ggml_type_info(type);
    if (!ti) c.fail(tf, "unknown ggml type " + std::to_string(type));
    t.type = static_cast<GGMLType>(type);
    if (t.ne[0] % ti->block_elems != 0)
      c.fail(tf, "first dim " + std::to_string(t.ne[0]) + " is not a multiple of the " + ti->name + " block size " +
                     std::to_string(ti->block_elems));
    uint64_t blocks = numel / ti->block_elems;
    if (blocks > std::numeric_limits<uint64_t>::max() / ti->block_bytes) c.fail(tf, "byte size overflows");
    t.nbytes = blocks * ti->block_bytes;
    t.offset = c.read<uint64_t>(tf + " offset");
    if (t.offset % alignment_ != 0)
      c.fail(tf, "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                     std::to_string(alignment_));
    tensors_.push_back(std::move(t));
  }
  tensors_sorted_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) tensors_sorted_[i] = static_cast<uint32_t>(i);
  std::stable_sort(tensors_sorted_.begin(), tensors_sorted_.end(),
                   [&](uint32_t a, uint32_t b) { return tensors_[a].name < tensors_[b].name; });
  for (size_t i = 1; i < tensors_sorted_.size(); ++i)
    if (tensors_[tensors_sorted_[i]].name == tensors_[tensors_sorted_[i - 1]].name)
      c.fail("tensor '" + tensors_[tensors_sorted_[i]].name + "'", "duplicate tensor name");

  // The data section starts at the next multiple of the alignment after the tensor infos.
  uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_)
    c.fail("data section", "starts at offset " + std::to_string(data_offset_) + " past end of file (size " +
                               std::to_string(size_) + ")");

  // Every tensor inside the file, and no two overlapping.
  std::vector<const GGUFTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_) {
    uint64_t avail = size_ > data_offset_ ? size_ - data_offset_ : 0;
    if (t.offset > avail || t.nbytes > avail - t.offset)
      throw std::runtime_error(path_ + ": tensor '" + t.name + "' data [offset " + std::to_string(data_offset_ + t.offset) +
                               ", " + std::to_string(t.nbytes) + " bytes] runs past end of file (size " +
                               std::to_string(size_) + ")");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GGUFTensorInfo* a, const GGUFTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const auto* a = by_offset[k - 1];
    const auto* b = by_offset[k];
    if (a->offset + a->nbytes > b->offset)
      throw std::runtime_error(path_ + ": tensor '" + a->name + "' data [offset " + std::to_string(a->offset) + ", " +
                               std::to_string(a->nbytes) + " bytes] overlaps tensor '" + b->name + "' at offset " +
                               std::to_string(b->offset));
  }
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = std::lower_bound(kv_sorted_.begin(), kv_sorted_.end(), key,
                             [&](uint32_t i, const std::string& k) { return kv_[i].first < k; });
  return it != kv_sorted_.end() && kv_[*it].first == key ? &kv_[*it].second : nullptr;
}

const GGUFValue& GGUFFile::get(const std::string& key) const {
  const GGUFValue* v = find(key);
  if (!v) throw std::runtime_error(path_ + ": metadata '" + key + "' is missing");
  return *v;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GGUFValue& v, const char* want) {
  std::string got = gguf_value_type_name(v.type());
  if (v.is_array()) got += std::string(" of ") + gguf_value_type_name(v.elem_type());
  throw std::runtime_error(path + ": metadata '" + key + "' has type " + got + " (expected " + want + ")");
}
std::string shown(const GGUFValue& v) {
  return v.type() == GGUFValueType::UINT64 ? std::to_string(v.u()) : std::to_string(v.i());
}
int64_t int_of(const std::string& path, const std::string& key, const GGUFValue& v) {
  if (!v.is_integer()) wrong_type(path, key, v, "an integer");
  if (v.type() == GGUFValueType::UINT64 && v.u() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error(path + ": metadata '" + key + "' value " + shown(v) + " does not fit in int64");
  return v.i();
}
}  // namespace

std::string GGUFFile::get_string(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (v.type() != GGUFValueType::STRING) wrong_type(path_, key, v, "STRING");
  return std::string(v.s());
}

int64_t GGUFFile::get_int(const std::string& key) const { return int_of(path_, key, get(key)); }

int64_t GGUFFile::get_int(const std::string& key, int64_t lo, int64_t hi) const {
  const GGUFValue& v = get(key);
  if (!v.is_integer()) wrong_type(path_, key, v, "an integer");
  const bool big = v.type() == GGUFValueType::UINT64 && v.u() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (big || v.i() < lo || v.i() > hi)
    throw std::runtime_error(path_ + ": metadata '" + key + "' is " + shown(v) + ", outside [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "]");
  return v.i();
}

double GGUFFile::get_float(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (v.type() != GGUFValueType::FLOAT32 && v.type() != GGUFValueType::FLOAT64) wrong_type(path_, key, v, "FLOAT32/FLOAT64");
  return v.f();
}

bool GGUFFile::get_bool(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (v.type() != GGUFValueType::BOOL) wrong_type(path_, key, v, "BOOL");
  return v.b();
}

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (!v.is_array() || v.elem_type() != GGUFValueType::STRING) wrong_type(path_, key, v, "ARRAY of STRING");
  std::vector<std::string> out;
  out.reserve(v.size());
  for (uint64_t k = 0; k < v.size(); ++k) out.emplace_back(v.item(k).s());
  return out;
}

std::vector<int64_t> GGUFFile::get_int_array(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (!v.is_array()) wrong_type(path_, key, v, "ARRAY of integers");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (uint64_t k = 0; k < v.size(); ++k) out.push_back(int_of(path_, key, v.item(k)));
  return out;
}

std::vector<double> GGUFFile::get_float_array(const std::string& key) const {
  const GGUFValue& v = get(key);
  if (!v.is_array() || (v.elem_type() != GGUFValueType::FLOAT32 && v.elem_type() != GGUFValueType::FLOAT64))
    wrong_type(path_, key, v, "ARRAY of FLOAT32/FLOAT64");
  std::vector<double> out;
  out.reserve(v.size());
  for (uint64_t k = 0; k < v.size(); ++k) out.push_back(v.item(k).f());
  return out;
}

const GGUFTensorInfo* GGUFFile::find_tensor(const std::string& name) const {
  auto it = std::lower_bound(tensors_sorted_.begin(), tensors_sorted_.end(), name,
                             [&](uint32_t i, const std::string& n) { return tensors_[i].name < n; });
  return it != tensors_sorted_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
}

const GGUFTensorInfo& GGUFFile::tensor(const std::string& name) const {
  const GGUFTensorInfo* t = find_tensor(name);
  if (!t) throw std::runtime_error(path_ + ": no tensor named '" + name + "'");
  return *t;
}

std::vector<float> GGUFFile::dequantize(const GGUFTensorInfo& t) const {
  const GGMLTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(t.type));
  if (!ti->dequantizable)
    throw std::runtime_error(path_ + ": tensor '" + t.name + "': dequantising " + ti->name + " is not implemented");
  std::vector<float> out(t.numel());
  ggml_dequantize(t.type, tensor_data(t), out.data(), out.size());
  return out;
}

}  // namespace dflash::io
