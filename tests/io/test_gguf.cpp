// GGUF reader: exhaustive fp16/bf16 conversion, every truncation of a valid file and random byte
// flips give std::runtime_error naming the file (never a crash), block dequantisation by hand.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gguf.h"

using namespace dflash::io;

namespace {

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

// A small valid file: a string, an array of strings and a u32; a Q8_0 tensor and an F32 tensor.
std::string valid_file() {
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 2);  // tensors
  put_u64(s, 3);  // kvs
  put_str(s, "general.architecture");
  put_u32(s, 8);
  put_str(s, "llama");
  put_str(s, "tokenizer.ggml.tokens");
  put_u32(s, 9);
  put_u32(s, 8);
  put_u64(s, 3);
  for (const char* t : {"a", "bc", ""}) put_str(s, t);
  put_str(s, "general.alignment");
  put_u32(s, 4);
  put_u32(s, 32);
  put_str(s, "w");
  put_u32(s, 2);
  put_u64(s, 32);
  put_u64(s, 2);
  put_u32(s, 8);  // Q8_0
  put_u64(s, 0);
  put_str(s, "b");
  put_u32(s, 1);
  put_u64(s, 4);
  put_u32(s, 0);  // F32
  put_u64(s, 96);
  s.append((32 - s.size() % 32) % 32, '\0');
  std::string data(68, '\0');
  uint16_t half_two = 0x4000;  // 2.0
  for (int b = 0; b < 2; ++b) {
    std::memcpy(&data[b * 34], &half_two, 2);
    for (int j = 0; j < 32; ++j) data[b * 34 + 2 + j] = static_cast<char>(j - 16);
  }
  data.append(28, '\0');
  float f[4] = {1, 2, 3, 4};
  data.append(reinterpret_cast<const char*>(f), 16);
  return s + data;
}

uint64_t fs_size(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return uint64_t(st.st_size);
}

std::string write_tmp(const std::string& bytes, const std::string& name) {
  std::string path = ::testing::TempDir() + "gguf_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

TEST(GGUF, Fp16ExhaustiveMatchesCompilerConversion) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 x;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&x, &hb, 2);
    float want = static_cast<float>(x);
    float got = fp16_to_fp32(hb);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "half 0x" << std::hex << h;
    }
  }
}

TEST(GGUF, Bf16IsTheHighHalf) {
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC040), -3.0f);
  EXPECT_TRUE(std::isinf(bf16_to_fp32(0x7F80)));
}

TEST(GGUF, ValidFileParsesAndDequantises) {
  std::string path = write_tmp(valid_file(), "valid.gguf");
  GGUFFile f = GGUFFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f.get_int("general.alignment"), 32);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& w = f.tensor("w");
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(w.nbytes, 68u);
  std::vector<float> v = f.dequantize(w);
  ASSERT_EQ(v.size(), 64u);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(v[k], 2.0f * static_cast<float>(k % 32 - 16)) << k;
  EXPECT_EQ(f.dequantize(f.tensor("b")), (std::vector<float>{1, 2, 3, 4}));
  // Typed getters name the key and the types.
  try {
    f.get_int("general.architecture");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture' has type STRING"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get("nope"), std::runtime_error);
  ::unlink(path.c_str());
}

TEST(GGUF, EveryTruncationIsAClearError) {
  std::string full = valid_file();
  std::string path = write_tmp("", "cut.gguf");
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(full.data(), static_cast<std::streamsize>(cut));
    try {
      GGUFFile::open(path);
      ADD_FAILURE() << "cut at " << cut << " parsed";
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  ::unlink(path.c_str());
}

TEST(GGUF, RandomByteFlipsNeverCrash) {
  std::string full = valid_file();
  std::string path = write_tmp("", "flip.gguf");
  std::mt19937 rng(1);
  int parsed = 0;
  for (int it = 0; it < 600; ++it) {
    std::string b = full;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
    try {
      GGUFFile f = GGUFFile::open(path);
      for (const auto& t : f.tensors())
        if (ggml_type_info(static_cast<uint32_t>(t.type))->dequantizable) f.dequantize(t);
      ++parsed;
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(parsed, 0);  // flips inside tensor data leave a valid file
  ::unlink(path.c_str());
}

// ---- Heap accounting for the memory tests below: every operator new/delete of this binary is counted. ----
namespace {
std::atomic<int64_t> g_live{0}, g_peak{0};
void count(int64_t d) {
  const int64_t now = g_live.fetch_add(d) + d;
  int64_t p = g_peak.load();
  while (now > p && !g_peak.compare_exchange_weak(p, now)) {
  }
}
}  // namespace

void* operator new(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  count(int64_t(malloc_usable_size(p)));
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  count(-int64_t(malloc_usable_size(p)));
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void* operator new[](size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

namespace {

// Peak heap bytes allocated while opening `path` (beyond what was live before).
int64_t peak_heap_of_open(const std::string& path, uint64_t* n_items) {
  const int64_t before = g_live.load();
  g_peak = before;
  {
    GGUFFile f = GGUFFile::open(path);
    *n_items = f.get("big").size();
  }
  return g_peak.load() - before;
}

std::string gguf_with_array(uint32_t elem_type, uint64_t n, const std::function<void(std::string&)>& put_elems) {
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 0);  // tensors
  put_u64(s, 1);  // kvs
  put_str(s, "big");
  put_u32(s, 9);
  put_u32(s, elem_type);
  put_u64(s, n);
  put_elems(s);
  return s;
}

}  // namespace

// Metadata arrays used to cost ~100x their size (one fat value object per element): a 60 MB file ended in
// std::bad_alloc under a 6 GB limit. They are views into the mapping now; the heap stays a small factor of the
// file size whatever the element type.
TEST(GGUF, MetadataArraysCostLittleHeap) {
  const uint64_t n = 4'000'000;
  const std::string u8 = write_tmp(gguf_with_array(0, n, [&](std::string& s) { s.append(n, '\x07'); }), "u8.gguf");
  uint64_t items = 0;
  const int64_t u8_peak = peak_heap_of_open(u8, &items);
  EXPECT_EQ(items, n);
  EXPECT_LT(u8_peak, 1 << 20) << "a " << n << "-byte UINT8 array";  // no per-element memory at all

  const std::string str = write_tmp(gguf_with_array(8, n, [&](std::string& s) {
                                      for (uint64_t k = 0; k < n; ++k) put_str(s, "x");
                                    }),
                                    "str.gguf");
  const int64_t str_peak = peak_heap_of_open(str, &items);
  EXPECT_EQ(items, n);
  EXPECT_LT(str_peak, int64_t(fs_size(str)) + (1 << 20)) << "an array of " << n << " one-byte strings";

  const uint64_t m = 1'000'000;  // arrays of empty arrays: 12 bytes each in the file
  const std::string nested = write_tmp(gguf_with_array(9, m, [&](std::string& s) {
                                         for (uint64_t k = 0; k < m; ++k) {
                                           put_u32(s, 8);
                                           put_u64(s, 0);
                                         }
                                       }),
                                       "nested.gguf");
  const int64_t nested_peak = peak_heap_of_open(nested, &items);
  EXPECT_EQ(items, m);
  EXPECT_LT(nested_peak, 2 * int64_t(fs_size(nested)) + (1 << 20));
  for (const auto& p : {u8, str, nested}) ::unlink(p.c_str());
}

TEST(GGUF, ArrayViewsDecodeEveryType) {
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 0);
  put_u64(s, 3);
  put_str(s, "i16s");
  put_u32(s, 9);
  put_u32(s, 3);  // INT16
  put_u64(s, 3);
  for (int16_t v : {int16_t(-7), int16_t(0), int16_t(32000)}) s.append(reinterpret_cast<const char*>(&v), 2);
  put_str(s, "nested");  // [["a", "bc"], [], ["d"]]
  put_u32(s, 9);
  put_u32(s, 9);
  put_u64(s, 3);
  for (const std::vector<std::string>& inner : {std::vector<std::string>{"a", "bc"}, {}, {"d"}}) {
    put_u32(s, 8);
    put_u64(s, inner.size());
    for (const auto& x : inner) put_str(s, x);
  }
  put_str(s, "n_layers");
  put_u32(s, 10);  // UINT64
  put_u64(s, (uint64_t(1) << 32) + 1);
  GGUFFile f = GGUFFile::from_bytes("mem.gguf", reinterpret_cast<const uint8_t*>(s.data()), s.size());
  EXPECT_EQ(f.get_int_array("i16s"), (std::vector<int64_t>{-7, 0, 32000}));
  const GGUFValue& v = f.get("nested");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v.item(0).size(), 2u);
  EXPECT_EQ(v.item(0).item(1).s(), "bc");
  EXPECT_EQ(v.item(1).size(), 0u);
  EXPECT_EQ(v.item(2).item(0).s(), "d");
  EXPECT_THROW(v.item(3), std::out_of_range);
  // A count about to be narrowed: the value as stored, and the limit, are named.
  EXPECT_EQ(f.get_int("n_layers"), (int64_t(1) << 32) + 1);
  try {
    f.get_int("n_layers", 1, 2147483647);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "mem.gguf: metadata 'n_layers' is 4294967297, outside [1, 2147483647]");
  }
}

TEST(GGUF, NonRegularFilesAreRefusedAtOnce) {
  const std::string fifo = ::testing::TempDir() + "gguf_fifo_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    GGUFFile::open(fifo);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fifo + ": is a FIFO"), std::string::npos) << e.what();
  }
  ::unlink(fifo.c_str());
  EXPECT_THROW(GGUFFile::open(::testing::TempDir()), std::runtime_error);
}

// Found by fuzzing: an empty tensor dequantised into an empty vector passed a null pointer to memcpy.
TEST(GGUF, EmptyTensorDequantises) {
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 1);
  put_u64(s, 0);
  put_str(s, "e");
  put_u32(s, 1);
  put_u64(s, 0);
  put_u32(s, 0);  // F32, no elements
  put_u64(s, 0);
  s.append((32 - s.size() % 32) % 32, '\0');
  GGUFFile f = GGUFFile::from_bytes("empty.gguf", reinterpret_cast<const uint8_t*>(s.data()), s.size());
  EXPECT_TRUE(f.dequantize(f.tensor("e")).empty());
}
