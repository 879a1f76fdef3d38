#include "sample_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "input_file.h"

namespace dflash::data {

SampleStore::SampleStore(const std::string& path) : path_(path) {
  std::string text;
  if (std::filesystem::exists(path)) text = io::read_regular_file(path);  // a FIFO or a folder: an error
  size_t pos = 0, good_end = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    ++line_no;
    const bool complete = nl != std::string::npos;
    const std::string line = text.substr(pos, (complete ? nl : text.size()) - pos);
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    bool ok = true;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      ok = false;
    }
    if (!complete || !ok) {
      // Only the last line may be torn; anything earlier means the file is not ours or was edited.
      if (complete && text.find_first_not_of("\n", nl) != std::string::npos)
        throw std::runtime_error(where + ": invalid JSON line in the middle of the file");
      dropped_torn_ = true;
      break;
    }
    if (!j.is_object() || !j.contains("index") || !j["index"].is_number_integer())
      throw std::runtime_error(where + ": record has no integer field 'index'");
    const int64_t idx = j["index"].get<int64_t>();
    if (!done_.insert(idx).second) throw std::runtime_error(where + ": duplicate index " + std::to_string(idx));
    pos = nl + 1;
    good_end = pos;
  }
  good_end_ = good_end;
}

void SampleStore::open_for_append() {
  if (fd_ >= 0) return;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open for writing (" + std::strerror(errno) + ")");
  if (dropped_torn_ && ::ftruncate(fd_, static_cast<off_t>(good_end_)) != 0)
    throw std::runtime_error(path_ + ": cannot truncate the torn last line (" + std::strerror(errno) + ")");
  if (::lseek(fd_, static_cast<off_t>(good_end_), SEEK_SET) < 0)
    throw std::runtime_error(path_ + ": seek failed (" + std::strerror(errno) + ")");
}

SampleStore::~SampleStore() {
  if (fd_ >= 0) ::close(fd_);
}

void SampleStore::append(const nlohmann::json& record) {
  if (!record.contains("index") || !record["index"].is_number_integer())
    throw std::invalid_argument("SampleStore::append: record needs an integer 'index'");
  const int64_t idx = record["index"].get<int64_t>();
  if (has(idx)) throw std::invalid_argument(path_ + ": index " + std::to_string(idx) + " already written");
  open_for_append();
  const std::string line = record.dump() + "\n";
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path_ + ": write failed (" + std::strerror(errno) + ")");
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) throw std::runtime_error(path_ + ": fsync failed (" + std::strerror(errno) + ")");
  done_.insert(idx);
}

}  // namespace dflash::data
