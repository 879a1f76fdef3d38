// The framework-free input helpers: only regular files are opened (a FIFO must not block, a directory must not
// give a garbage size), JSON with a duplicate key or absurd nesting is refused, narrowing refuses instead of
// wrapping, atomic outputs leave nothing behind on failure and stale temporaries of dead writers are removed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "atomic_output.h"
#include "checked_int.h"
#include "error_of.h"
#include "input_file.h"
#include "strict_json.h"

namespace fs = std::filesystem;
using namespace dflash::io;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflash_io_base_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(InputFile, RefusesFifoDirectoryAndMissingWithoutBlocking) {
  const fs::path d = fresh_dir("input");
  const std::string fifo = (d / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // With no writer, opening the FIFO for reading would block forever; it must fail at once instead.
  std::string err = error_of([&] { InputFile f(fifo); });
  EXPECT_NE(err.find(fifo + ": is a FIFO (named pipe), expected a regular file"), std::string::npos) << err;
  err = error_of([&] { read_regular_file(fifo); });
  EXPECT_NE(err.find("FIFO"), std::string::npos) << err;
  err = error_of([&] { require_regular_file(fifo); });
  EXPECT_NE(err.find("FIFO"), std::string::npos) << err;
  err = error_of([&] { InputFile f(d.string()); });
  EXPECT_NE(err.find(d.string() + ": is a directory, expected a regular file"), std::string::npos) << err;
  err = error_of([&] { InputFile f((d / "missing").string()); });
  EXPECT_NE(err.find("cannot open for reading: No such file"), std::string::npos) << err;
  err = error_of([&] { InputFile f("/dev/null"); });
  EXPECT_NE(err.find("character device"), std::string::npos) << err;

  const std::string plain = (d / "plain.txt").string();
  std::ofstream(plain) << "hello";
  EXPECT_EQ(read_regular_file(plain), "hello");
  err = error_of([&] { read_regular_file(plain, 3); });
  EXPECT_NE(err.find("over the limit of 3 bytes"), std::string::npos) << err;
}

TEST(StrictJson, DuplicateKeysAndDeepNestingAreErrors) {
  EXPECT_EQ(parse_json_strict(R"({"a": 1, "b": {"a": 2}})")["b"]["a"], 2);
  std::string err = error_of([] { parse_json_strict(R"({"steps": 10, "lr": 1e-3, "steps": 20})"); });
  EXPECT_NE(err.find("key 'steps' appears twice in one object (at the top level)"), std::string::npos) << err;
  err = error_of([] { parse_json_strict(R"({"model": {"vocab": {"a": 0, "a": 1}}})"); });
  EXPECT_NE(err.find("key 'a' appears twice in one object (in 'model.vocab')"), std::string::npos) << err;
  // The same key in two sibling objects is fine.
  EXPECT_NO_THROW(parse_json_strict(R"([{"a": 1}, {"a": 2}])"));
  err = error_of([] { parse_json_strict(std::string(5000, '[') + std::string(5000, ']')); });
  EXPECT_NE(err.find("nested deeper than 100 levels"), std::string::npos) << err;
  err = error_of([] { parse_json_strict("{\"a\": 1"); });
  EXPECT_EQ(err.rfind("not valid JSON", 0), 0u) << err;
  EXPECT_THROW(parse_json_strict("{} {}"), JsonError);
}

TEST(StrictJson, IntegersAreRangeCheckedAndShownAsWritten) {
  const auto j = parse_json_strict(R"({"big": 18446744073709551615, "f": 3.0, "b": true, "n": -5, "i": 7})");
  EXPECT_FALSE(json_integer_in(j["big"], 0, std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(json_shown(j["big"]), "18446744073709551615");
  EXPECT_FALSE(json_integer_in(j["f"], 0, 10));  // a float is not an integer, even 3.0
  EXPECT_FALSE(json_integer_in(j["b"], 0, 10));
  EXPECT_FALSE(json_integer_in(j["n"], 0, 10));
  EXPECT_EQ(json_integer_in(j["n"], -5, 10), -5);
  EXPECT_EQ(json_integer_in(j["i"], 0, 10), 7);
}

TEST(CheckedInt, NarrowingRefusesWhatWouldWrap) {
  const int64_t two32p1 = (int64_t(1) << 32) + 1;
  EXPECT_FALSE(narrow_in<int>(two32p1));  // a plain cast gives 1
  EXPECT_EQ(narrow_in<int>(int64_t(7)), 7);
  EXPECT_FALSE(narrow_in<uint32_t>(int64_t(-1)));
  EXPECT_FALSE(narrow_in<int64_t>(std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(narrow_in<int>(int64_t(0), 1, 10));
  const std::string err = error_of([&] { checked_narrow<int>(two32p1, "layers", 1, 4096); });
  EXPECT_EQ(err, "layers is 4294967297, outside [1, 4096]");
}

TEST(AtomicOutput, CommitReplacesAndAbandonLeavesNothing) {
  const fs::path d = fresh_dir("atomic");
  const std::string out = (d / "out.jsonl").string();
  write_file_atomically(out, "old\n");
  {
    AtomicOutputFile f(out);
    f.write("partial");
    EXPECT_TRUE(fs::exists(f.temp_path()));
  }  // destroyed without commit: a failed writer
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator{}), 1);
  {
    AtomicOutputFile f(out);
    f.write(std::string(3 << 20, 'x'));  // larger than the buffer: written through
    f.commit();
  }
  EXPECT_EQ(fs::file_size(out), size_t(3) << 20);
  const std::string err = error_of([&] { AtomicOutputFile f((d / "no_such_dir" / "x").string()); });
  EXPECT_NE(err.find("the folder '" + (d / "no_such_dir").string() + "' does not exist"), std::string::npos) << err;
}

// Issue 36: whatever an output path names, it is never clobbered into something else.
TEST(AtomicOutput, DestinationsThatAreNoFileAreRefusedBeforeAnyWrite) {
  const fs::path d = fresh_dir("refused");
  const std::string dir = (d / "sub").string();
  fs::create_directory(dir);
  EXPECT_NE(error_of([&] { check_output_path("", "--json"); }).find("--json: the output path is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path(dir, "--json"); }).find("is a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path(dir + "/", "--json"); }).find("ends in '/'"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path((d / "new.json/").string(), "--json"); }).find("ends in '/'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path("a\nb", "--json"); }).find("control character"), std::string::npos);
  fs::create_symlink(d / "missing", d / "dangling");
  EXPECT_NE(error_of([&] { check_output_path((d / "dangling").string(), "--json"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { AtomicOutputFile f(dir); }).find("is a folder"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir));  // still a folder
  EXPECT_EQ(error_of([&] { check_output_path((d / "fresh.json").string(), "--json"); }), "");
}

TEST(AtomicOutput, CharacterDevicesAndFifosAreStreamedNotReplaced) {
  {
    AtomicOutputFile f("/dev/null");
    EXPECT_TRUE(f.is_stream());
    f.write("ignored\n");
    f.commit();
  }
  EXPECT_TRUE(fs::is_character_file("/dev/null"));  // not turned into a regular file
  const fs::path d = fresh_dir("fifo");
  const std::string fifo = (d / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo);
    std::getline(in, got);
  });
  {
    AtomicOutputFile f(fifo);
    f.write("through the pipe\n");
    f.commit();
  }
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator{}), 1);  // no temporary beside it
}

TEST(AtomicOutput, ASymlinkIsFollowedAndKept) {
  const fs::path d = fresh_dir("symlink");
  fs::create_directory(d / "real");
  write_file_atomically((d / "real" / "out.json").string(), "old\n");
  fs::create_symlink(d / "real" / "out.json", d / "link.json");
  write_file_atomically((d / "link.json").string(), "new\n");
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  std::ifstream in(d / "real" / "out.json");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "new");
}

TEST(AtomicOutput, StaleTemporariesOfDeadWritersAreRemoved) {
  const fs::path d = fresh_dir("stale");
  // A process that exits at once: its pid is then (almost surely) not running any more.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = std::to_string(child);
  for (const std::string& n : std::vector<std::string>{"step-3.safetensors.tmp", "latest.tmp", "step-4.safetensors.tmp." + dead,
                              "step-4.safetensors.tmp." + dead + ".tmp." + dead})
    std::ofstream(d / n) << "x";
  // Kept: finished files, and the temporary of a live writer (the parent of this test, pid 1 here or not).
  std::ofstream(d / "step-2.safetensors") << "x";
  std::ofstream(d / ("step-5.safetensors.tmp." + std::to_string(::getppid()))) << "x";
  std::ofstream(d / "notes.tmpl") << "x";
  EXPECT_EQ(remove_stale_temporaries(d.string()), 4);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(d)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"step-2.safetensors", "step-5.safetensors.tmp." + std::to_string(::getppid()),
                                         "notes.tmpl"}));
  EXPECT_EQ(remove_stale_temporaries((d / "missing").string()), 0);
}
