// Durable file updates for resumable outputs (checkpoints, shard indices): a reader sees the old file or the
// new one, never a torn one, and a finished write survives a power cut. Torch-free.
#pragma once
#include <string>

namespace dflash::data {

// fsync of a file; throws naming it when it cannot be opened or synced.
void fsync_path(const std::string& path);
// fsync of a folder (makes a rename durable); errors are ignored on filesystems that cannot.
void fsync_dir(const std::string& dir);
// Writes text to `path` atomically (temporary file + fsync + rename + fsync of the folder).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace dflash::data
