// Dequantisation of the ggml block formats (legacy and K-quants) to float32, following ggml's reference (scalar) code.
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


// ---- K-quants: super-blocks of 256; element order follows ggml (and gguf.quants' NumPy code). ----

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: 16 groups of 16, 2-bit q, (d*sc)*q - dmin*m.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  float d = fp16_to_fp32(u16(b + 80)), dmin = fp16_to_fp32(u16(b + 82));
  for (int i = 0; i < 256; ++i) {
    int g = i / 16, c = i / 128, sh = 2 * ((i / 32) % 4), l = i % 32;
    float dl = d * static_cast<float>(scales[g] & 0xF);
    float ml = dmin * static_cast<float>(scales[g] >> 4);
    y[i] = dl * static_cast<float>((qs[c * 32 + l] >> sh) & 3) - ml;
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 6-bit signed scales, 3-bit q (high bit inverted).
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  float d = fp16_to_fp32(u16(b + 108));
  float dl[16];
  for (int j = 0; j < 16; ++j) {
    int lo = (sc[j % 8] >> (4 * (j / 8))) & 0x0F;
    int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    dl[j] = d * static_cast<float>(static_cast<int8_t>(lo | (hi << 4)) - 32);
  }
  for (int i = 0; i < 256; ++i) {
    int c = i / 128, sh = 2 * ((i / 32) % 4), l = i % 32;
    int ql = (qs[c * 32 + l] >> sh) & 3;
    int qh = ((hmask[l] >> (i / 32)) & 1) ^ 1;
    y[i] = dl[i / 16] * static_cast<float>(ql - (qh << 2));
  }
}

// The 6-bit scale and min of sub-block k (of 8) in Q4_K/Q5_K's 12 packed bytes.
void k_scale_min(const uint8_t* s, int k, int& sc, int& mn) {
  if (k < 4) {
    sc = s[k] & 0x3F;
    mn = s[k + 4] & 0x3F;
  } else {
    sc = (s[k + 4] & 0x0F) | ((s[k - 4] >> 2) & 0x30);
    mn = (s[k + 4] >> 4) | ((s[k] >> 2) & 0x30);
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32, (d*sc)*q - dmin*m.
void q4_k(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b)), dmin = fp16_to_fp32(u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int k = 0; k < 8; ++k) {
    int sc, mn;
    k_scale_min(scales, k, sc, mn);
    float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) y[k * 32 + l] = d1 * static_cast<float>((qs[(k / 2) * 32 + l] >> (4 * (k % 2))) & 0xF) - m1;
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus a fifth bit from qh.
void q5_k(const uint8_t* b, float* y) {
  float d = fp16_to_fp32(u16(b)), dmin = fp16_to_fp32(u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int k = 0; k < 8; ++k) {
    int sc, mn;
    k_scale_min(scales, k, sc, mn);
    float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) {
      int q = ((qs[(k / 2) * 32 + l] >> (4 * (k % 2))) & 0xF) | (((qh[l] >> k) & 1) << 4);
      y[k * 32 + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 16 groups of 16, 6-bit q - 32, (d*sc)*q.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  float d = fp16_to_fp32(u16(b + 208));
  for (int i = 0; i < 256; ++i) {
    int c = i / 128, e = i % 64, h = (i / 64) % 2, s = (i / 32) % 4, l = i % 32;
    int lo = (ql[c * 64 + e] >> (4 * h)) & 0xF;
    int hi = (qh[c * 32 + l] >> (2 * s)) & 3;
    int q = static_cast<int8_t>(lo | (hi << 4)) - 32;
    y[i] = (d * static_cast<float>(scales[i / 16])) * static_cast<float>(q);
  }
}

template <void (*Block)(const uint8_t*, float*)>
void super_blocks(const uint8_t* src, float* dst, uint64_t n, uint32_t block_bytes) {
  for (uint64_t k = 0; k < n / 256; ++k) Block(src + k * block_bytes, dst + k * 256);
}
}  // namespace

void ggml_dequantize(GGMLType type, const uint8_t* src, float* dst, uint64_t n) {
  const GGMLTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(type));
  if (!ti) throw std::runtime_error("ggml_dequantize: unknown ggml type " + std::to_string(static_cast<uint32_t>(type)));
  if (n % ti->block_elems != 0)
    throw std::runtime_error(std::string("ggml_dequantize: ") + std::to_string(n) + " elements is not a multiple of the " +
                             ti->name + " block size " + std::to_string(ti->block_elems));
  if (n == 0) return;  // an empty tensor: dst may be null (memcpy with a null pointer is undefined even for 0 bytes)
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
    case GGMLType::Q2_K: super_blocks<q2_k>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q3_K: super_blocks<q3_k>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q4_K: super_blocks<q4_k>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q5_K: super_blocks<q5_k>(src, dst, n, ti->block_bytes); return;
    case GGMLType::Q6_K: super_blocks<q6_k>(src, dst, n, ti->block_bytes); return;
    default: break;
  }
  throw std::runtime_error(std::string("ggml_dequantize: dequantising ") + ti->name + " is not implemented");
}

}  // namespace dflash::io
