#include "dtype_names.h"

#include <stdexcept>

namespace dflash::util {
namespace {

struct Spelling {
  const char* name;
  Dtype dtype;
};
constexpr Spelling kSpellings[] = {
    {"fp32", Dtype::F32}, {"f32", Dtype::F32},  {"float32", Dtype::F32}, {"float", Dtype::F32},
    {"bf16", Dtype::BF16}, {"bfloat16", Dtype::BF16},
    {"fp16", Dtype::F16}, {"f16", Dtype::F16},  {"float16", Dtype::F16}, {"half", Dtype::F16},
    {"fp64", Dtype::F64}, {"f64", Dtype::F64},  {"float64", Dtype::F64}, {"double", Dtype::F64},
};

}  // namespace

std::optional<Dtype> dtype_from_name(const std::string& name) {
  for (const auto& s : kSpellings)
    if (name == s.name) return s.dtype;
  return std::nullopt;
}

Dtype parse_dtype(const std::string& name, const std::string& where) {
  if (const auto d = dtype_from_name(name)) return *d;
  throw std::invalid_argument(where + ": expected " + kDtypeSpellings + ", got '" + name + "'");
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::BF16: return "bf16";
    case Dtype::F16: return "fp16";
    case Dtype::F64: return "fp64";
    case Dtype::F32: break;
  }
  return "fp32";
}

const char* hf_dtype_name(Dtype d) {
  switch (d) {
    case Dtype::BF16: return "bfloat16";
    case Dtype::F16: return "float16";
    case Dtype::F64: return "float64";
    case Dtype::F32: break;
  }
  return "float32";
}

int64_t dtype_bytes(Dtype d) { return d == Dtype::F64 ? 8 : d == Dtype::F32 ? 4 : 2; }

}  // namespace dflash::util
