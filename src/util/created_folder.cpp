#include "created_folder.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace dflash::util {
namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  ::remove(path);
  return 0;  // go on: best effort
}

}  // namespace

// POSIX nftw, children first, symlinks not followed, rather than std::filesystem::remove_all: in a binary that
// links LibTorch that call resolves to the copy inside libtorch.so, which crashes.
void remove_quietly(const std::string& path) {
  if (!path.empty()) ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

CreatedFolder::CreatedFolder(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "runs/" names "runs"
  for (fs::path cur = p; !cur.empty() && !fs::exists(fs::symlink_status(cur)); cur = cur.parent_path())
    made_ = cur.string();
  try {
    fs::create_directories(p);
  } catch (...) {
    remove_quietly(made_);  // the parents made before the failure
    throw;
  }
}

CreatedFolder::~CreatedFolder() { remove_quietly(made_); }

}  // namespace dflash::util
