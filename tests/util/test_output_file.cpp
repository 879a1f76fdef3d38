// The output checks that are not io_base's atomic-file tests (tests/io/test_io_base.cpp covers the file writer):
// output folders (a run folder, an export, feature shards) and resumable outputs (appended to, read back).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "error_of.h"
#include "output_file.h"

namespace fs = std::filesystem;
using dflash::util::check_output_folder;
using dflash::util::check_resumable_output_path;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflash_util_out_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(OutputFolder, AFolderOrANewNameUnderAFolderPasses) {
  const fs::path d = fresh_dir("ok");
  EXPECT_EQ(error_of([&] { check_output_folder(d.string(), "--out"); }), "");
  EXPECT_EQ(error_of([&] { check_output_folder(d.string() + "/", "--out"); }), "");  // a trailing '/' names a folder
  EXPECT_EQ(error_of([&] { check_output_folder((d / "new").string(), "--out"); }), "");
  EXPECT_EQ(error_of([&] { check_output_folder((d / "a" / "b" / "c").string(), "--out"); }), "");  // parents made later
  fs::create_directory(d / "real");
  fs::create_directory_symlink(d / "real", d / "link");
  EXPECT_EQ(error_of([&] { check_output_folder((d / "link").string(), "--out"); }), "");  // followed
  EXPECT_FALSE(fs::exists(d / "new")) << "the check creates nothing";
}

TEST(OutputFolder, AFileADeviceADanglingLinkOrAPathUnderAFileIsRefused) {
  const fs::path d = fresh_dir("bad");
  std::ofstream(d / "file") << "x";
  const std::string file = (d / "file").string();
  EXPECT_EQ(error_of([&] { check_output_folder(file, "train config: 'out'"); }),
            "train config: 'out': '" + file + "' is a file: an output folder must be a folder or a new name");
  EXPECT_EQ(error_of([&] { check_output_folder(file + "/run", "--out"); }),
            "--out: '" + file + "/run': '" + file + "' is not a folder, so no folder can be made there");
  EXPECT_NE(error_of([&] { check_output_folder(file + "/a/b", "--out"); }).find("is not a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_folder("/dev/null", "--out"); }).find("is a device, FIFO or socket"),
            std::string::npos);
  fs::create_symlink(d / "gone", d / "dangling");
  EXPECT_NE(error_of([&] { check_output_folder((d / "dangling").string(), "--out"); }).find("symlink to a path that does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_folder("", "--out"); }).find("--out: the output folder is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_folder("a\tb", "--out"); }).find("control character"), std::string::npos);
}

TEST(ResumableOutput, ARegularFileOrNewNamePassesAStreamIsRefused) {
  const fs::path d = fresh_dir("resumable");
  std::ofstream(d / "old.jsonl") << "{}\n";
  EXPECT_EQ(error_of([&] { check_resumable_output_path((d / "old.jsonl").string(), "--output"); }), "");
  EXPECT_EQ(error_of([&] { check_resumable_output_path((d / "new.jsonl").string(), "--output"); }), "");
  ASSERT_EQ(::mkfifo((d / "pipe").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { check_resumable_output_path((d / "pipe").string(), "--output"); }).find("is a device or FIFO"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_resumable_output_path("/dev/null", "--output"); }).find("must be a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_resumable_output_path(d.string(), "--output"); }).find("is a folder"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "new.jsonl"));
}
