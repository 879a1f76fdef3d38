// A folder of the test process's own under $TMPDIR or /tmp (mkdtemp: a fresh name, so parallel runs never meet),
// removed with all it holds when the object goes: tests that write files leave nothing behind in /tmp. Hold one in
// a function-local static to share it between a binary's tests (removed at exit).
// POSIX calls only, no std::filesystem: in a binary linked with LibTorch, std::filesystem's symbols can resolve to
// libtorch's own copies, whose remove_all crashes when run at exit (seen with GCC 12 and torch 2.11).
#pragma once
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace dflash::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    const char* tmp = ::getenv("TMPDIR");
    std::string name = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
    if (!::mkdtemp(name.data())) throw std::runtime_error("ScratchDir: mkdtemp " + name + " failed");
    path_ = name;
  }
  ~ScratchDir() {  // best effort, children first, links not followed
    ::nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p); }, 16,
           FTW_DEPTH | FTW_PHYS);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dflash::testing
