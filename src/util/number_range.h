// One rule for every numeric setting (config fields, flags, environment switches, op arguments): a documented,
// finite range. A value is inside when it is finite, not subnormal (1e-310 is refused; 0 is not subnormal) and
// between the bounds (each closed or open). Callers phrase the message in their own form; the range and the value
// are written the same way everywhere: "a finite number in (0, 1]", "1e-39". Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::util {

struct NumberRange {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;  // (lo, ...] instead of [lo, ...]
  bool contains(double v) const;
  // "a finite number in [0.001, 1000000]" (bounds in number_text's spelling).
  std::string text() const;
};

// Shorthands: closed [lo, hi], (lo, hi], [lo, hi).
inline NumberRange closed(double lo, double hi) { return {lo, hi, false, false}; }
inline NumberRange above(double lo, double hi) { return {lo, hi, true, false}; }
inline NumberRange below(double lo, double hi) { return {lo, hi, false, true}; }

// The shortest text that reads back as `v`: "0.9", "1e-39", "nan", "inf", "-inf".
std::string number_text(double v);

// nullopt when `v` is inside `r`, else what was expected: r.text() + `note` (", 0: off" style remarks).
std::optional<std::string> out_of_range(double v, const NumberRange& r, const std::string& note = "");

// Throws std::invalid_argument "<what> must be <range><note>, got <v>" when `v` is outside `r`; returns `v`.
// `what` names the source and the setting: "plan: --gpu-tflops", "train config: 'lr'".
double check_number(double v, const NumberRange& r, const std::string& what, const std::string& note = "");
// The same for integers: "<what> must be an integer in [lo, hi]<note>, got <v>".
int64_t check_integer(int64_t v, int64_t lo, int64_t hi, const std::string& what, const std::string& note = "");

// An environment variable, when set and non-empty, as an integer in [lo, hi]; otherwise (set but malformed or
// out of range) std::invalid_argument "<name> must be an integer in [lo, hi]<note>, got '<text>'". nullopt when unset.
std::optional<int64_t> env_integer(const char* name, int64_t lo, int64_t hi, const std::string& note = "");

}  // namespace dflash::util
