// Outputs that are whole or absent: bytes go to "<path>.tmp.<pid>" beside the target, then fsync, rename over
// the target and fsync of the folder. Every output path of every command goes through here, whatever it names:
// a regular file (or a new name) is replaced atomically; a character device or FIFO (/dev/null, /dev/stdout, a
// pipe) is written to as a stream, never replaced; a symlink is followed (its target is what gets replaced); an
// empty path, a trailing '/', a directory, a block device or socket, or a missing folder is refused. A writer that fails (or is destroyed before commit) removes its temporary;
// one killed with SIGKILL leaves it, and remove_stale_temporaries() clears such leftovers later.
// Output folders (a training run, an export, feature shards) and resumable files (appended to, read back on a
// rerun) have their own checks below. Every error names the option and the path. Torch-free (the ground floor:
// src/io forwards these as dflash::io::..., src/ops uses them for `bench attention --json`).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace dflash::util {

// "<path>.tmp.<pid of this process>".
std::string temp_path_for(const std::string& path);

// Refuses (std::invalid_argument "<what>: '<path>' is ...") a path no output can go to. Commands call it on every
// output before any work starts, so a bad destination fails in a second rather than after the run.
void check_output_path(const std::string& path, const std::string& what);

// An output that is appended to and read back when the command reruns (`data regenerate --output`): a regular
// file or a new name (a symlink to either is followed); a device or FIFO cannot be read back, so it is refused
// here, as is everything check_output_path refuses.
void check_resumable_output_path(const std::string& path, const std::string& what);

// An output folder (a run folder, an export, feature shards): an existing folder (reused: resume or replace, as the
// command says), or a new name whose nearest existing parent is a folder (the command creates the missing ones
// when it writes its first file, not before). Refused: an empty path, a control character, a path naming a file,
// device or FIFO, a dangling symlink, a parent that is a file. A trailing '/' is fine here.
void check_output_folder(const std::string& path, const std::string& what);

class AtomicOutputFile {
 public:
  // Creates the temporary (throws naming it when the folder is missing or read-only).
  // Checks the path first (check_output_path, named "output").
  explicit AtomicOutputFile(std::string path);
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;
  ~AtomicOutputFile();  // without commit(): closes and removes the temporary

  void write(std::string_view bytes);  // buffered
  // Flush, fsync, rename over the target, fsync the folder. Throws (and removes the temporary) on failure.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }  // empty for a stream (device or FIFO)
  bool is_stream() const { return stream_; }

 private:
  void flush();
  void write_raw(const char* p, size_t n);
  std::string path_, tmp_, target_, buf_;  // target_: path_ with symlinks followed
  int fd_ = -1;
  bool stream_ = false;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicOutputFile.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Removes, in `dir`, temporaries of writers that are gone: names ending in ".tmp" (older writers) or in
// ".tmp.<pid>" where no process <pid> runs any more (or <pid> is this process, which at a resume holds none
// open). Returns how many were removed; a missing folder removes nothing.
int remove_stale_temporaries(const std::string& dir);

}  // namespace dflash::util
