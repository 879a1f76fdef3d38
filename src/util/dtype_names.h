// One spelling of dtype names for every command and settings file: fp32 | bf16 | fp16 | fp64, with the
// aliases people type (f32, float32, bfloat16, half, ...). Torch-free, so torch-free settings can check them;
// src/ops/compute_settings.h maps them to LibTorch types.
#pragma once
#include <string>

namespace dflash::util {

// The canonical short name ("fp32", "bf16", "fp16", "fp64") of `name`; an unknown one is an error
// "<where>: expected fp32, bf16, fp16 or fp64, got '<name>'".
std::string canonical_dtype(const std::string& name, const std::string& where);
// The Hugging Face spelling of a canonical name (config.json's "dtype": "bfloat16", ...).
std::string hf_dtype_name(const std::string& canonical);

}  // namespace dflash::util
