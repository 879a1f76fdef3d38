#include "mxfp4.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace dflash::models {

at::Tensor mxfp4_dequantize(const at::Tensor& blocks_in, const at::Tensor& scales_in, const std::string& name) {
  if (blocks_in.scalar_type() != at::kByte || scales_in.scalar_type() != at::kByte)
    throw std::runtime_error("target weights: MXFP4 tensor '" + name + "_blocks' / '" + name + "_scales' must be uint8, got " +
                             std::string(c10::toString(blocks_in.scalar_type())) + " / " +
                             std::string(c10::toString(scales_in.scalar_type())));
  if (blocks_in.dim() < 2 || blocks_in.size(-1) != 16 ||
      blocks_in.sizes().slice(0, blocks_in.dim() - 1) != scales_in.sizes())
    throw std::runtime_error("target weights: MXFP4 tensor '" + name + "_blocks' has shape " +
                             c10::str(blocks_in.sizes()) + ", expected its scales' shape " + c10::str(scales_in.sizes()) +
                             " + [16]");
  // E2M1 codes 0..15: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  static constexpr float kValues[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const at::Tensor blocks = blocks_in.to(at::kCPU).contiguous(), scales = scales_in.to(at::kCPU).contiguous();
  std::vector<int64_t> shape = scales.sizes().vec();
  const int64_t groups = scales.numel();
  if (shape.empty()) shape.push_back(1);
  shape.back() *= 32;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  const uint8_t* b = blocks.data_ptr<uint8_t>();
  const uint8_t* s = scales.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  for (int64_t g = 0; g < groups; ++g) {
    // E8M0 has no zero and one NaN: the byte 255. transformers reads it as 2^128 = inf (weights inf and nan), which
    // generated token 0 forever with exit 0.
    if (s[g] == 255) {
      std::string where = "[";
      int64_t rest = g;
      std::vector<int64_t> idx(size_t(scales.dim()));
      for (int64_t d = scales.dim() - 1; d >= 0; --d) idx[size_t(d)] = rest % scales.size(d), rest /= scales.size(d);
      for (size_t d = 0; d < idx.size(); ++d) where += (d ? ", " : "") + std::to_string(idx[d]);
      throw std::runtime_error("target weights: MXFP4 tensor '" + name + "_scales' holds the byte 255 at " + where +
                               "] (NaN in E8M0, the scales' format): the checkpoint is damaged");
    }
    // 2^(s - 127) as a float32 (2^-127 is subnormal, 2^128 overflows to inf), then one rounding per product,
    // as torch.ldexp computes it
    const float scale = std::ldexp(1.0f, int(s[g]) - 127);
    for (int64_t j = 0; j < 16; ++j) {
      const uint8_t byte = b[g * 16 + j];
      o[g * 32 + 2 * j] = kValues[byte & 0x0F] * scale;
      o[g * 32 + 2 * j + 1] = kValues[byte >> 4] * scale;
    }
  }
  return out;
}

}  // namespace dflash::models
