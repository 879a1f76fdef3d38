// One spelling of memory sizes for every flag and settings file: "90GB", "80GiB", "512MB", "1.5e9", "4096"
// (decimal units KB/MB/GB/TB as 10^3..10^12, binary KiB/MiB/GiB; a bare number is bytes). Torch-free.
#pragma once
#include <string>

namespace dflash::util {

struct ByteSize {
  double bytes = 0;  // > 0 once parsed; 0: not set
  std::string text;  // as written, for messages and for writing the setting back
  bool set() const { return bytes > 0; }
};

// A positive size; otherwise "<where>: expected a size like 90GB, 80GiB or 512MB, got '<text>'" (or names the
// unknown unit).
ByteSize parse_byte_size(const std::string& text, const std::string& where);
// "57.07 GB", "109.1 MB", "512 B": decimal units, as the planner prints them.
std::string human_bytes(double bytes);

}  // namespace dflash::util
