// Resumable JSONL output: one JSON object per line, each with an integer "index". Opening an existing file
// reads the indices already written; a torn last line (a crash mid-write: no trailing newline or invalid
// JSON) is truncated away. Each append is written in one call and fsync'ed, so a sample is either fully on
// disk or absent. Torch-free.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dflash::data {

class SampleStore {
 public:
  // Reads what the file holds (nothing when missing) and writes nothing: a command refused after this leaves no
  // file behind. Throws naming the file and line for a corrupt complete line (not the last one) or a line without
  // an integer "index".
  explicit SampleStore(const std::string& path);
  // Creates the file when missing and drops a torn last line; append() calls it when needed. A command calls it
  // once every check has passed, so a finished run leaves its file even when it added nothing.
  void open_for_append();
  ~SampleStore();
  SampleStore(const SampleStore&) = delete;
  SampleStore& operator=(const SampleStore&) = delete;

  bool has(int64_t index) const { return done_.count(index) > 0; }
  const std::set<int64_t>& indices() const { return done_; }
  bool dropped_torn_line() const { return dropped_torn_; }

  // Appends one record (must carry a new "index"); durable when this returns.
  void append(const nlohmann::json& record);

 private:
  std::string path_;
  int fd_ = -1;
  std::set<int64_t> done_;
  size_t good_end_ = 0;  // bytes of whole lines
  bool dropped_torn_ = false;
};

}  // namespace dflash::data
