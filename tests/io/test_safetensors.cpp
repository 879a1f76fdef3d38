// Round trips through our writer and reader, and the validation errors for damaged files.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

namespace fs = std::filesystem;
using dflash::io::SafetensorsFile;
using dflash::io::SafetensorsFolder;

namespace {

std::string tmp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("dflash_st_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A raw file: 8-byte length + header text + data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& path, std::initializer_list<std::string> parts) {
  std::string err = error_of(path);
  ASSERT_FALSE(err.empty()) << "no error for " << path;
  for (const auto& p : parts) EXPECT_NE(err.find(p), std::string::npos) << "'" << p << "' missing in: " << err;
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypes) {
  at::manual_seed(0);
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"f64", at::randn({3, 4}, at::kDouble)},
      {"f32", at::randn({2, 3, 5})},
      {"f16", at::randn({7}).to(at::kHalf)},
      {"bf16", at::randn({4, 4}).to(at::kBFloat16)},
      {"i64", at::randint(-1000, 1000, {6}, at::kLong)},
      {"i32", at::randint(-1000, 1000, {2, 2}, at::kInt)},
      {"i16", at::randint(-1000, 1000, {3}, at::kShort)},
      {"i8", at::randint(-100, 100, {5}, at::kChar)},
      {"u8", at::randint(0, 255, {5}, at::kByte)},
      {"bool", at::randint(0, 2, {9}, at::kLong).to(at::kBool)},
      {"scalar", at::scalar_tensor(3.5)},
      {"empty", at::empty({0, 4})},
      {"strided", at::randn({4, 6}).t()},  // non-contiguous input
  };
  const std::string path = tmp_path("all.safetensors");
  dflash::io::save_safetensors(path, ts, {{"format", "pt"}, {"note", "x"}});
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.entries().size(), ts.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x");
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(f.contains(name));
    at::Tensor got = f.load(name);
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(got, t)) << name;
  }
  at::Tensor as_double = f.load("f32", at::kDouble);
  EXPECT_EQ(as_double.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(as_double, ts[1].second.to(at::kDouble)));
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_THROW(f.load("nope"), std::runtime_error);
}

TEST(Safetensors, DataSectionIsAligned) {
  const std::string path = tmp_path("align.safetensors");
  dflash::io::save_safetensors(path, {{"a", at::ones({3})}});
  auto h = dflash::io::read_safetensors_header(path);
  EXPECT_EQ(h.data_start % 8, 0);
}

TEST(Safetensors, WriterRejectsDuplicatesAndLeavesNoTemp) {
  const std::string path = tmp_path("dup.safetensors");
  EXPECT_THROW(dflash::io::save_safetensors(path, {{"a", at::ones({1})}, {"a", at::ones({1})}}), std::runtime_error);
  EXPECT_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(e.path().filename().string().find("dup.safetensors.tmp"), std::string::npos);
  EXPECT_THROW(dflash::io::save_safetensors(path, {{"c", at::ones({1}, at::kComplexFloat)}}), std::runtime_error);
}

TEST(Safetensors, TruncatedFiles) {
  const std::string good = tmp_path("good.safetensors");
  dflash::io::save_safetensors(good, {{"w", at::arange(16, at::kFloat)}});
  const std::string bytes = read_bytes(good);
  const std::string p = tmp_path("trunc.safetensors");
  write_bytes(p, bytes.substr(0, 5));
  expect_error(p, {p, "too short"});
  write_bytes(p, bytes.substr(0, 20));
  expect_error(p, {p, "header length", "past the end"});
  write_bytes(p, bytes.substr(0, bytes.size() - 4));
  expect_error(p, {p, "tensor 'w'", "data_offsets", "past the data section"});
}

TEST(Safetensors, CorruptHeaders) {
  const std::string p = tmp_path("bad.safetensors");
  const std::string data(16, '\0');
  write_bytes(p, raw_file("{\"w\": {\"dtype\": \"F32\", ", data));
  expect_error(p, {p, "not valid JSON"});
  write_bytes(p, raw_file("[1,2]", data));
  expect_error(p, {p, "JSON object"});
  write_bytes(p, raw_file(R"({"w":{"dtype":"F8","shape":[4],"data_offsets":[0,16]}})", data));
  expect_error(p, {p, "tensor 'w'", "'dtype'", "'F8'", "F64,F32"});
  write_bytes(p, raw_file(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", data));
  expect_error(p, {p, "tensor 'w'", "data_offsets", "spans 16 bytes, expected 20"});
  write_bytes(p, raw_file(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data));
  expect_error(p, {p, "tensor 'w'", "'shape'", "negative"});
  write_bytes(p, raw_file(R"({"w":{"dtype":"F32","shape":[4]}})", data));
  expect_error(p, {p, "tensor 'w'", "missing field 'data_offsets'"});
  write_bytes(p, raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,4]}})", data));
  expect_error(p, {p, "tensor 'w'", "data_offsets"});
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                          data));
  expect_error(p, {p, "tensor 'b'", "overlaps tensor 'a'"});
  write_bytes(p, raw_file(R"({"__metadata__":{"k":1}})", data));
  expect_error(p, {p, "__metadata__.k", "string"});
  std::string huge(8, '\xff');
  write_bytes(p, huge + "{}");
  expect_error(p, {p, "header length", "limit"});
  write_bytes(p, raw_file(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x07", 2)));
  auto f = SafetensorsFile::open(p);
  EXPECT_THROW(f.load("b"), std::runtime_error);
}

TEST(Safetensors, ShardedFolder) {
  fs::path dir = fs::path(tmp_path("sharded"));
  fs::create_directories(dir);
  dflash::io::save_safetensors((dir / "model-00001-of-00002.safetensors").string(), {{"a", at::ones({2})}});
  dflash::io::save_safetensors((dir / "model-00002-of-00002.safetensors").string(),
                               {{"b", at::zeros({3})}, {"c", at::arange(4)}});
  write_bytes((dir / "model.safetensors.index.json").string(),
              R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
              R"("b":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto f = SafetensorsFolder::open(dir.string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(at::equal(f.load("c"), at::arange(4)));
  EXPECT_TRUE(at::equal(f.load("a"), at::ones({2})));
  EXPECT_THROW(f.load("d"), std::runtime_error);

  write_bytes((dir / "model.safetensors.index.json").string(),
              R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  try {
    SafetensorsFolder::open(dir.string());
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not contain"), std::string::npos) << e.what();
  }
  fs::path empty = fs::path(tmp_path("empty_dir"));
  fs::create_directories(empty);
  EXPECT_THROW(SafetensorsFolder::open(empty.string()), std::runtime_error);
}

// As the reference reader: the tensors must cover the data section exactly, or another reader would see them
// shifted. Each damage names the tensor (or the trailing bytes) and the offsets.
TEST(Safetensors, DataSectionMustBeCoveredExactly) {
  const std::string p = tmp_path("cover.safetensors");
  const std::string two_tensors =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  write_bytes(p, raw_file(two_tensors, std::string(16, '\1')));
  EXPECT_EQ(SafetensorsFile::open(p).entries().size(), 2u);  // exact: fine

  // Stray bytes before the data: the first tensor does not start at 0.
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0')));
  expect_error(p, {p, "tensor 'a'", "[4, 12]", "gap of 4 unused bytes at data offset 0", "must start at 0"});
  // A gap between two tensors.
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                          std::string(16, '\0')));
  expect_error(p, {p, "tensor 'b'", "gap of 4 unused bytes at data offset 4 after tensor 'a' [0, 4]"});
  // Trailing bytes after the last tensor.
  write_bytes(p, raw_file(two_tensors, std::string(19, '\0')));
  expect_error(p, {p, "3 trailing bytes after tensor 'b' [8, 16]"});
  // A header length one byte short: the header loses its last padding byte and the data section starts one byte
  // early, so every tensor would be read shifted by one byte.
  const std::string good = tmp_path("short.safetensors");
  dflash::io::save_safetensors(good, {{"w", at::arange(4, at::kFloat)}});
  std::string bytes = read_bytes(good);
  const std::string header_padded = bytes.substr(8, bytes[0] | (bytes[1] << 8));
  ASSERT_EQ(header_padded.back(), ' ') << "the test needs a padded header";
  bytes[0] = static_cast<char>(bytes[0] - 1);
  write_bytes(p, bytes);
  expect_error(p, {p, "1 trailing bytes after tensor 'w' [0, 16]"});
  // Overlaps, also between a tensor and an empty one placed inside it.
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                          R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                          std::string(12, '\0')));
  expect_error(p, {p, "tensor 'e' field 'data_offsets' [4, 4] overlaps tensor 'a' [0, 12]"});
  // Duplicate names (JSON keeps only the last one silently).
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, '\0')));
  expect_error(p, {p, "key 'a' appears twice"});
  // Stray bytes before the JSON.
  write_bytes(p, raw_file(std::string("  ") + two_tensors, std::string(16, '\0')));
  expect_error(p, {p, "header must start with '{'"});
  // No tensors but data bytes.
  write_bytes(p, raw_file("{}", std::string(8, '\0')));
  expect_error(p, {p, "8 trailing bytes after the header (no tensors)"});
  write_bytes(p, raw_file("{}", ""));
  EXPECT_TRUE(SafetensorsFile::open(p).entries().empty());
}

TEST(Safetensors, NonRegularFilesAreRefusedAtOnce) {
  const std::string dir = tmp_path("a_dir.safetensors");
  fs::create_directories(dir);
  expect_error(dir, {dir, "is a directory, expected a regular file"});
  const std::string fifo = tmp_path("fifo.safetensors");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error(fifo, {fifo, "FIFO"});  // would block forever in a plain open()
}

// Integer or bool data must not become float weights without a word (and floats not integers).
TEST(Safetensors, LoadingAcrossDtypeKindsIsRefused) {
  const std::string p = tmp_path("kinds.safetensors");
  dflash::io::save_safetensors(p, {{"ids", at::arange(4, at::kInt)}, {"w", at::ones({2})}, {"m", at::ones({2}, at::kBool)}});
  const auto f = SafetensorsFile::open(p);
  try {
    f.load("ids", at::kFloat);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'ids' is stored as I32, expected a floating-point dtype"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(f.load_floating("m"), std::runtime_error);
  EXPECT_THROW(f.load("w", at::kLong), std::runtime_error);
  EXPECT_EQ(f.load("ids", at::kLong).scalar_type(), at::kLong);  // integer -> integer is fine
  EXPECT_EQ(f.load_floating("w").scalar_type(), at::kFloat);
}

// The writer used to look every name up in an ordered JSON object (linear per lookup): 200k tensors took
// minutes. This round trip of 200k entries runs in a blink now; it asserts the result, not the time.
TEST(Safetensors, HeaderOfManyTensorsRoundTrips) {
  std::vector<dflash::io::SafetensorsEntry> entries;
  const int n = 200000;
  for (int i = 0; i < n; ++i)
    entries.push_back({std::to_string(i) + ".input_ids", "I64", {2}, int64_t(i) * 16, int64_t(i + 1) * 16});
  const std::string text = dflash::io::build_safetensors_header(entries, {{"format", "dflash-hidden-v1"}});
  const auto h = dflash::io::parse_safetensors_header(text, int64_t(n) * 16, "test");
  ASSERT_EQ(h.entries.size(), size_t(n));
  EXPECT_EQ(h.entries.back().name, std::to_string(n - 1) + ".input_ids");
  EXPECT_EQ(h.metadata.at("format"), "dflash-hidden-v1");
  entries.push_back(entries.front());
  EXPECT_THROW(dflash::io::build_safetensors_header(entries, {}), std::runtime_error);
}
