// GGUF reader: exhaustive fp16/bf16 conversion, every truncation of a valid file and random byte
// flips give std::runtime_error naming the file (never a crash), block dequantisation by hand.
#include <gtest/gtest.h>
#include <unistd.h>

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
