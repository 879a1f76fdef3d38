// Dequantisation of the ggml block formats to float32, following ggml's reference (scalar) code.
// Compiled with -ffp-contract=off so `q*d + m` rounds like NumPy's separate multiply and add.
#include <cstring>
#include <stdexcept>
#include <string>

#include "gguf.h"

namespace dflash::io {

float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: normalise into a float32 normal.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_fp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

template <typename T>
void convert(const uint8_t* src, float* dst, uint64_t n) {
  for (uint64_t k = 0; k < n; ++k) {
    T v;
    std::memcpy(&v, src + k * sizeof(T), sizeof(T));
    dst[k] = static_cast<float>(v);
  }
}

// Q4_0: {f16 d; u8 qs[16]}: low nibbles are elements 0..15, high nibbles 16..31, value (q - 8) * d.
void q4_0(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}: q * d + m.
void q4_1(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b));
  float m = fp16_to_fp32(u16(b + 2));
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}: the fifth bit of element j is bit j of qh; value (q - 16) * d.
void q5_0(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b));
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    int x0 = ((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
    int x1 = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: q * d + m.
void q5_1(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b));
  float m = fp16_to_fp32(u16(b + 2));
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    int x0 = (qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10);
    int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}: q * d.
void q8_0(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b));
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

template <void (*Block)(const uint8_t*, float*)>
void blocks(const uint8_t* src, float* dst, uint64_t n, uint32_t block_bytes) {
  for (uint64_t k = 0; k < n / 32; ++k) Block(src + k * block_bytes, dst + k * 32);
}

}  // namespace

void ggml_dequantize(GGMLType type, const uint8_t* src, float* dst, uint64_t n) {
  const GGMLTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(type));
  if (!ti) throw std::runtime_error("ggml_dequantize: unknown ggml type " + std::to_string(static_cast<uint32_t>(type)));
  if (n % ti->block_elems != 0)
    throw std::runtime_error(std::string("ggml_dequantize: ") + std::to_string(n) + " elements is not a multiple of the " +
                             ti->name + " block size " + std::to_string(ti->block_elems));
  switch (type) {
    case GGMLType::F32: std::memcpy(dst, src, n * 4); return;
    case GGMLType::F16: for (uint64_t k = 0; k < n; ++k) dst[k] = fp16_to_fp32(u16(src + 2 * k)); return;
    case GGMLType::BF16: for (uint64_t k = 0; k < n; ++k) dst[k] = bf16_to_fp32(u16(src + 2 * k)); return;
    case GGMLType::F64: convert<double>(src, dst, n); return;
    case GGMLType::I8: convert<int8_t>(src, dst, n); return;
    case GGMLType::I16: convert<int16_t>(src, dst, n); return;
    case GGMLType::I32: convert<int32_t>(src, dst, n); return;
    case GGMLType::I64: convert<int64_t>(src, dst, n); return;
    case GGMLType::Q4_0: blocks<q4_0>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q4_1: blocks<q4_1>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q5_0: blocks<q5_0>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q5_1: blocks<q5_1>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q8_0: blocks<q8_0>(src, dst, n, ti->block_bytes); return;
    default: break;
  }
  throw std::runtime_error(std::string("ggml_dequantize: dequantising ") + ti->name + " is not implemented");
}

}  // namespace dflash::io
