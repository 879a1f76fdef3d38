#include "output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace dflash::util {
namespace {

std::string errno_text() { return std::strerror(errno); }

void fsync_folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // some filesystems cannot; the rename itself is done
  (void)::fsync(fd);
  ::close(fd);
}

// The pid in a "<name>.tmp.<pid>" name; 0 for "<name>.tmp"; -1 for names that are no temporary.
long temp_owner(const std::string& name) {
  const auto at = name.rfind(".tmp");
  if (at == std::string::npos || at == 0) return -1;
  const std::string rest = name.substr(at + 4);
  if (rest.empty()) return 0;
  if (rest[0] != '.' || rest.size() < 2 || rest.size() > 11) return -1;
  long pid = 0;
  for (size_t i = 1; i < rest.size(); ++i) {
    if (rest[i] < '0' || rest[i] > '9') return -1;
    pid = pid * 10 + (rest[i] - '0');
  }
  return pid > 0 ? pid : -1;
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

enum class OutputKind { NewFile, RegularFile, Stream };

// What `path` names once symlinks are followed; throws for what no output may go to.
OutputKind output_kind(const std::string& path, const std::string& what) {
  const std::string quoted = what + ": '" + path + "'";
  if (path.empty()) throw std::invalid_argument(what + ": the output path is empty (give a file name, or '-' where the command writes to stdout)");
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw std::invalid_argument(what + ": the output path contains a control character");
  if (path.back() == '/') throw std::invalid_argument(quoted + " ends in '/': an output must be a file, not a folder");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw std::invalid_argument(quoted + " is a folder: an output must be a file");
    if (S_ISREG(st.st_mode)) return OutputKind::RegularFile;
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return OutputKind::Stream;
    throw std::invalid_argument(quoted + " is neither a regular file, a character device nor a FIFO");
  }
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    throw std::invalid_argument(quoted + " is a symlink to a path that does not exist");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat dst {};
  if (!dir.empty() && (::stat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)))
    throw std::invalid_argument(quoted + ": the folder '" + dir + "' does not exist");
  return OutputKind::NewFile;
}

// The file a symlink chain ends at (the path itself when it is none), so the rename replaces the target and
// leaves the link in place.
std::string followed(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(path, ec)) return path;
  const auto real = std::filesystem::canonical(path, ec);
  return ec ? path : real.string();
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what) { (void)output_kind(path, what); }

void check_resumable_output_path(const std::string& path, const std::string& what) {
  if (output_kind(path, what) == OutputKind::Stream)
    throw std::invalid_argument(what + ": '" + path + "' is a device or FIFO: this output is appended to and read "
                                "back on a rerun, so it must be a regular file");
}

void check_output_folder(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::invalid_argument(what + ": the output folder is empty (give a folder name)");
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw std::invalid_argument(what + ": the output folder contains a control character");
  const std::string quoted = what + ": '" + path + "'";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return;
    throw std::invalid_argument(quoted + (S_ISREG(st.st_mode) ? " is a file" : " is a device, FIFO or socket") +
                                ": an output folder must be a folder or a new name");
  }
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    throw std::invalid_argument(quoted + " is a symlink to a path that does not exist");
  // The nearest existing ancestor must be a folder ("file.txt/run" can never be created).
  std::filesystem::path up = std::filesystem::path(path).lexically_normal();
  while (up.has_relative_path() && up.has_parent_path() && up != up.parent_path()) {
    up = up.parent_path();
    struct stat ast {};
    if (::stat(up.c_str(), &ast) != 0) continue;
    if (!S_ISDIR(ast.st_mode))
      throw std::invalid_argument(quoted + ": '" + up.string() + "' is not a folder, so no folder can be made there");
    return;
  }
}

std::string temp_path_for(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

AtomicOutputFile::AtomicOutputFile(std::string path) : path_(std::move(path)) {
  if (output_kind(path_, "output") == OutputKind::Stream) {
    stream_ = true;  // a device or FIFO: written in place, never replaced by a regular file
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open for writing: " + errno_text());
    return;
  }
  const std::string target = followed(path_);
  tmp_ = temp_path_for(target);
  target_ = target;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot create the temporary '" + tmp_ + "': " + errno_text());
}

AtomicOutputFile::~AtomicOutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !stream_) ::unlink(tmp_.c_str());
}

void AtomicOutputFile::write_raw(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t put = ::write(fd_, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0)
      throw std::runtime_error(path_ + ": write" + (stream_ ? std::string() : " to '" + tmp_ + "'") + " failed: " + errno_text());
    p += put;
    n -= static_cast<size_t>(put);
  }
}

void AtomicOutputFile::flush() {
  write_raw(buf_.data(), buf_.size());
  buf_.clear();
}

void AtomicOutputFile::write(std::string_view bytes) {
  if (committed_ || fd_ < 0) throw std::logic_error(path_ + ": write after commit");
  constexpr size_t kBuffer = size_t(1) << 20;
  if (buf_.size() + bytes.size() <= kBuffer) {
    buf_.append(bytes);
    return;
  }
  flush();
  if (bytes.size() >= kBuffer) write_raw(bytes.data(), bytes.size());  // large blocks go out without a copy
  else buf_.append(bytes);
}

void AtomicOutputFile::commit() {
  if (committed_ || fd_ < 0) throw std::logic_error(path_ + ": committed twice");
  flush();
  if (stream_) {
    const int rc = ::close(fd_);
    fd_ = -1;
    committed_ = true;
    if (rc != 0) throw std::runtime_error(path_ + ": close failed: " + errno_text());
    return;
  }
  if (::fsync(fd_) != 0) throw std::runtime_error(path_ + ": fsync of '" + tmp_ + "' failed: " + errno_text());
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw std::runtime_error(path_ + ": close of '" + tmp_ + "' failed: " + errno_text());
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    throw std::runtime_error(path_ + ": rename from '" + tmp_ + "' failed: " + errno_text());
  committed_ = true;
  fsync_folder_of(target_);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicOutputFile out(path);
  out.write(bytes);
  out.commit();
}

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const long owner = temp_owner(name);
    if (owner < 0 || !e.is_regular_file(ec)) continue;
    if (owner > 0 && owner != ::getpid() && process_alive(owner)) continue;  // a live writer's file
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace dflash::util
