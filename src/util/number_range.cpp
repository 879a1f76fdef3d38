#include "number_range.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace dflash::util {

bool NumberRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (v != 0 && std::fpclassify(v) == FP_SUBNORMAL) return false;  // no setting means 1e-310: a typo or overflow
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  return hi_open ? v < hi : v <= hi;
}

std::string NumberRange::text() const {
  return "a finite number in " + std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
         (hi_open ? ")" : "]");
}

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e16) {  // 1000000, not 1e+06
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {  // the shortest that reads back exactly
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::optional<std::string> out_of_range(double v, const NumberRange& r, const std::string& note) {
  if (r.contains(v)) return std::nullopt;
  return r.text() + note;
}

double check_number(double v, const NumberRange& r, const std::string& what, const std::string& note) {
  if (const auto e = out_of_range(v, r, note)) throw std::invalid_argument(what + " must be " + *e + ", got " + number_text(v));
  return v;
}

int64_t check_integer(int64_t v, int64_t lo, int64_t hi, const std::string& what, const std::string& note) {
  if (v < lo || v > hi)
    throw std::invalid_argument(what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "]" + note + ", got " + std::to_string(v));
  return v;
}

std::optional<int64_t> env_integer(const char* name, int64_t lo, int64_t hi, const std::string& note) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno == 0 && end && *end == '\0' && v >= lo && v <= hi) return v;
  throw std::invalid_argument(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "]" + note + ", got '" + text + "'");
}

}  // namespace dflash::util
