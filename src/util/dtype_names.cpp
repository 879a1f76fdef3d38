#include "dtype_names.h"

#include <stdexcept>
#include <utility>

namespace dflash::util {
namespace {

struct Spelling {
  const char* name;
  const char* canonical;
};
constexpr Spelling kSpellings[] = {
    {"fp32", "fp32"}, {"f32", "fp32"},  {"float32", "fp32"}, {"float", "fp32"},
    {"bf16", "bf16"}, {"bfloat16", "bf16"},
    {"fp16", "fp16"}, {"f16", "fp16"},  {"float16", "fp16"}, {"half", "fp16"},
    {"fp64", "fp64"}, {"f64", "fp64"},  {"float64", "fp64"}, {"double", "fp64"},
};

}  // namespace

std::string canonical_dtype(const std::string& name, const std::string& where) {
  for (const auto& s : kSpellings)
    if (name == s.name) return s.canonical;
  throw std::invalid_argument(where + ": expected fp32, bf16, fp16 or fp64, got '" + name + "'");
}

std::string hf_dtype_name(const std::string& canonical) {
  const std::string c = canonical_dtype(canonical, "dtype");
  return c == "fp32" ? "float32" : c == "bf16" ? "bfloat16" : c == "fp16" ? "float16" : "float64";
}

}  // namespace dflash::util
