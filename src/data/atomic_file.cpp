#include "atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <stdexcept>

#include "atomic_output.h"

namespace dflash::data {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(path + ": fsync failed");
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  io::write_file_atomically(path, text);  // "<path>.tmp.<pid>", fsync, rename, fsync of the folder
}

}  // namespace dflash::data
