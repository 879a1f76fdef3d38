// Resumable JSONL: indices survive reopening, a torn last line is dropped, duplicates and mid-file
// corruption are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sample_store.h"

namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("dflash_test_data_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(SampleStore, AppendsAndResumes) {
  const std::string p = temp_path("a.jsonl");
  {
    dflash::data::SampleStore s(p);
    EXPECT_TRUE(s.indices().empty());
    s.append({{"index", 3}, {"x", 1}});
    s.append({{"index", 0}, {"x", 2}});
    EXPECT_THROW(s.append({{"index", 3}}), std::invalid_argument);
    EXPECT_THROW(s.append({{"x", 3}}), std::invalid_argument);
  }
  dflash::data::SampleStore s(p);
  EXPECT_TRUE(s.has(3));
  EXPECT_TRUE(s.has(0));
  EXPECT_FALSE(s.has(1));
  EXPECT_FALSE(s.dropped_torn_line());
  s.append({{"index", 1}});
  EXPECT_EQ(slurp(p), "{\"index\":3,\"x\":1}\n{\"index\":0,\"x\":2}\n{\"index\":1}\n");
}

TEST(SampleStore, DropsTornLastLine) {
  const std::string p = temp_path("b.jsonl");
  std::ofstream(p) << "{\"index\":0}\n{\"index\":1,\"inp";  // crash mid-write
  {
    dflash::data::SampleStore s(p);
    EXPECT_TRUE(s.dropped_torn_line());
    EXPECT_TRUE(s.has(0));
    EXPECT_FALSE(s.has(1));
    s.append({{"index", 1}});
  }
  EXPECT_EQ(slurp(p), "{\"index\":0}\n{\"index\":1}\n");
  // A complete line holding invalid JSON at the end is torn too (e.g. zero-filled block after a crash).
  std::ofstream(p, std::ios::app) << "{\"ind\n";
  dflash::data::SampleStore s(p);
  EXPECT_TRUE(s.dropped_torn_line());
  EXPECT_EQ(s.indices().size(), 2u);
}

TEST(SampleStore, RefusesCorruptMiddleAndDuplicates) {
  const std::string p = temp_path("c.jsonl");
  std::ofstream(p) << "{\"index\":0}\nnot json\n{\"index\":2}\n";
  try {
    dflash::data::SampleStore s(p);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(":2: invalid JSON"), std::string::npos) << e.what();
  }
  std::ofstream(p) << "{\"index\":0}\n{\"index\":0}\n";
  EXPECT_THROW(dflash::data::SampleStore{p}, std::runtime_error);
  std::ofstream(p) << "{\"idx\":0}\n";
  EXPECT_THROW(dflash::data::SampleStore{p}, std::runtime_error);
}
