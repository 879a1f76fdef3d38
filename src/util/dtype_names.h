// One spelling of dtypes for every command and settings file: fp32 | bf16 | fp16 | fp64, with the aliases people
// type (f32, float32, bfloat16, half, ...), read into one torch-free type. src/ops/compute_settings.h maps it to
// LibTorch's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::util {

enum class Dtype { F32, BF16, F16, F64 };

// The dtype a name or alias spells; nullopt for anything else.
std::optional<Dtype> dtype_from_name(const std::string& name);
inline constexpr const char* kDtypeSpellings = "fp32, bf16, fp16 or fp64";
// The same, throwing "<where>: expected fp32, bf16, fp16 or fp64, got '<name>'".
Dtype parse_dtype(const std::string& name, const std::string& where);

const char* dtype_name(Dtype d);     // the canonical short name: "fp32", "bf16", "fp16", "fp64"
const char* hf_dtype_name(Dtype d);  // config.json's spelling: "float32", "bfloat16", "float16", "float64"
int64_t dtype_bytes(Dtype d);

}  // namespace dflash::util
