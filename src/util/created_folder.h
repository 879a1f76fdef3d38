// An output folder a command makes for itself and takes away again when the command fails: constructed, it makes
// the folder and any missing parents; destroyed before keep() (an exception on the way out), it removes the
// topmost folder it made, with everything in it. A folder that existed before is never removed: for "a/b/c" with
// "a" already there, "a/b" goes and "a" stays. Torch-free.
#pragma once
#include <string>

namespace dflash::util {

class CreatedFolder {
 public:
  explicit CreatedFolder(const std::string& path);  // throws std::filesystem::filesystem_error, naming the path
  CreatedFolder(const CreatedFolder&) = delete;
  CreatedFolder& operator=(const CreatedFolder&) = delete;
  ~CreatedFolder();
  void keep() { made_.clear(); }  // the command succeeded: what it made stays

 private:
  std::string made_;  // the topmost folder made here ("" when the folder existed)
};

// Removes `path` and everything in it, best effort (errors ignored; symlinks removed, never followed). Use it, not
// std::filesystem::remove_all, in anything linked with LibTorch: that call resolves to libtorch.so's copy, which
// crashes (seen in `dflash export --gguf`).
void remove_quietly(const std::string& path);

}  // namespace dflash::util
