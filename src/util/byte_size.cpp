#include "byte_size.h"

#include <cctype>
#include <cstdio>
#include <stdexcept>

namespace dflash::util {

ByteSize parse_byte_size(const std::string& text, const std::string& where) {
  std::string s;
  for (char ch : text)
    if (ch != ' ') s += ch;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(where + ": expected a size like 90GB, 80GiB or 512MB, got '" + text + "'");
  }
  std::string unit = s.substr(used);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double mul = 1;
  if (unit == "" || unit == "B") mul = 1;
  else if (unit == "KB" || unit == "K") mul = 1e3;
  else if (unit == "MB" || unit == "M") mul = 1e6;
  else if (unit == "GB" || unit == "G") mul = 1e9;
  else if (unit == "TB" || unit == "T") mul = 1e12;
  else if (unit == "KIB") mul = 1024.0;
  else if (unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "GIB") mul = 1024.0 * 1024 * 1024;
  else throw std::invalid_argument(where + ": unknown unit '" + unit + "' in '" + text + "' (expected B, MB, GB, GiB, ...)");
  // At least one byte (1e-300GB is no size) and below 1e18 (inf, 1e308 and nan are none either).
  if (!(v * mul >= 1) || !(v * mul < 1e18))
    throw std::invalid_argument(where + ": must be a size of at least 1 byte and below 1e18 bytes, got '" + text + "'");
  return ByteSize{v * mul, text};
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

}  // namespace dflash::util
