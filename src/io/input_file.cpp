#include "input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dflash::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& msg) { throw std::runtime_error(path + ": " + msg); }

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

void check_mode(const std::string& path, mode_t m) {
  if (!S_ISREG(m)) fail(path, std::string("is ") + kind_of(m) + ", expected a regular file");
}

}  // namespace

InputFile::InputFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat can refuse it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    check_mode(path, st.st_mode);
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes) {
  InputFile f(path);
  if (max_bytes > 0 && f.size() > max_bytes)
    fail(path, "is " + std::to_string(f.size()) + " bytes, over the limit of " + std::to_string(max_bytes) + " bytes");
  std::string out;
  out.reserve(static_cast<size_t>(f.size()));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (max_bytes > 0 && out.size() > max_bytes)
      fail(path, "grew past the limit of " + std::to_string(max_bytes) + " bytes while being read");
  }
  return out;
}

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  check_mode(path, st.st_mode);
}

}  // namespace dflash::io
