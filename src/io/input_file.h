// Opening files that users name: only regular files are read, so a FIFO, a device or a directory given as an
// input ends in one clear error ("PATH: is a directory, expected a regular file") instead of a read that blocks
// forever or a garbage size. Framework-free.
#pragma once
#include <cstdint>
#include <string>

namespace dflash::io {

// An open read-only descriptor, closed on destruction.
class InputFile {
 public:
  // Throws std::runtime_error naming `path` when it cannot be opened or is not a regular file.
  explicit InputFile(const std::string& path);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time
  // Hands the descriptor over (the caller closes it).
  int release();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file; `max_bytes` > 0 refuses larger files with an error naming the limit.
std::string read_regular_file(const std::string& path, uint64_t max_bytes = 0);

// Throws like InputFile when `path` is not an existing regular file; for readers that must open by name
// (zlib, std::ifstream). Never opens the file, so a FIFO cannot block it.
void require_regular_file(const std::string& path);

}  // namespace dflash::io
