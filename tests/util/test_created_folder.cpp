// CreatedFolder: a failure takes away exactly the folders the command made, never one that was there before.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "created_folder.h"

namespace fs = std::filesystem;
using dflash::util::CreatedFolder;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("dflash_created_folder_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(CreatedFolder, FailureRemovesTheTopmostFolderItMadeAndKeepsTheParentThatExisted) {
  const fs::path d = fresh_dir("fail");
  {
    CreatedFolder made((d / "a" / "b" / "c").string());
    ASSERT_TRUE(fs::is_directory(d / "a" / "b" / "c"));
    std::ofstream(d / "a" / "b" / "c" / "samples.jsonl") << "{}\n";  // what the command wrote in it
  }
  EXPECT_FALSE(fs::exists(d / "a"));
  EXPECT_TRUE(fs::is_directory(d));
  fs::remove_all(d);
}

TEST(CreatedFolder, AFolderThatExistedStaysWithItsFiles) {
  const fs::path d = fresh_dir("existed");
  fs::create_directories(d / "mine");
  std::ofstream(d / "mine" / "keep.txt") << "x";
  { CreatedFolder made((d / "mine").string()); }
  EXPECT_TRUE(fs::exists(d / "mine" / "keep.txt"));
  { CreatedFolder made((d / "mine" / "new/").string()); }  // a trailing '/': the same folder "new"
  EXPECT_FALSE(fs::exists(d / "mine" / "new"));
  EXPECT_TRUE(fs::exists(d / "mine" / "keep.txt"));
  fs::remove_all(d);
}

TEST(CreatedFolder, KeepLeavesWhatItMade) {
  const fs::path d = fresh_dir("keep");
  {
    CreatedFolder made((d / "runs" / "r1").string());
    made.keep();
  }
  EXPECT_TRUE(fs::is_directory(d / "runs" / "r1"));
  fs::remove_all(d);
}
