// Narrowing that refuses instead of wrapping: every size or count read from a file or a flag goes through a
// range check before it becomes an int (a layer count of 2^32+1 must be an error, not a 1-layer model).
// Messages show the value as it was given. Framework-free, header-only.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace dflash::io {

// `v` converted to To when it lies in [lo, hi] (by default To's whole range); nullopt otherwise.
template <typename To, typename From>
std::optional<To> narrow_in(From v, To lo = std::numeric_limits<To>::min(), To hi = std::numeric_limits<To>::max()) {
  static_assert(std::is_integral_v<To> && std::is_integral_v<From>);
  if (std::cmp_less(v, lo) || std::cmp_greater(v, hi)) return std::nullopt;
  return static_cast<To>(v);
}

// As narrow_in, but throws std::out_of_range "WHAT is V, outside [lo, hi]".
template <typename To, typename From>
To checked_narrow(From v, const std::string& what, To lo = std::numeric_limits<To>::min(),
                  To hi = std::numeric_limits<To>::max()) {
  if (auto t = narrow_in<To>(v, lo, hi)) return *t;
  throw std::out_of_range(what + " is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
}

}  // namespace dflash::io
