#include "gpt_oss_weights.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

#include "mxfp4.h"

namespace dflash::models {
namespace {

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The stored tensor under `suffix`, checked: present, `shape`, floating point.
at::Tensor stored(const GptOssLayerSource& src, const std::string& suffix, const std::vector<int64_t>& shape,
                  const std::string& alternative = "") {
  const std::string n = src.name(suffix);
  if (!src.has(suffix)) throw std::runtime_error("target weights: missing tensor '" + n + "'" + alternative);
  at::Tensor t = src.get(suffix);
  if (t.sizes().vec() != shape)
    throw std::runtime_error("target weight '" + n + "' has shape " + shape_str(t.sizes()) + ", expected " + shape_str(shape));
  if (!at::isFloatingType(t.scalar_type()))
    throw std::runtime_error("target weights: tensor '" + n + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                             ", expected floating-point weights");
  return t;
}

// An expert matrix in the [E, out, in] layout of moe_block.h: from its MXFP4 blocks and scales (stored
// [E, out, in / 32, 16] and [E, out, in / 32]), else from transformers' fused [E, in, out] tensor.
at::Tensor expert_matrix(const GptOssLayerSource& src, const std::string& proj, int64_t E, int64_t out, int64_t in) {
  const std::string blocks = "mlp.experts." + proj + "_blocks", scales = "mlp.experts." + proj + "_scales";
  if (src.has(blocks) || src.has(scales)) {
    for (const std::string& s : {blocks, scales})
      if (!src.has(s)) throw std::runtime_error("target weights: missing tensor '" + src.name(s) + "' (MXFP4 needs _blocks and _scales)");
    if (in % 32 != 0)
      throw std::runtime_error("target weights: MXFP4 tensor '" + src.name(blocks) + "' needs an input width divisible by 32, got " +
                               std::to_string(in));
    const at::Tensor b = src.get(blocks), s = src.get(scales);
    const std::vector<int64_t> bshape{E, out, in / 32, 16}, sshape{E, out, in / 32};
    if (b.sizes().vec() != bshape)
      throw std::runtime_error("target weight '" + src.name(blocks) + "' has shape " + shape_str(b.sizes()) + ", expected " + shape_str(bshape));
    if (s.sizes().vec() != sshape)
      throw std::runtime_error("target weight '" + src.name(scales) + "' has shape " + shape_str(s.sizes()) + ", expected " + shape_str(sshape));
    return mxfp4_dequantize(b, s, src.name("mlp.experts." + proj));
  }
  return stored(src, "mlp.experts." + proj, {E, in, out}, " (nor its MXFP4 '_blocks' + '_scales')").transpose(1, 2);
}

// Rows 0, 2, 4, ... (gate) then 1, 3, 5, ... (up) of dim 1: the checkpoint interleaves them.
at::Tensor deinterleave(const at::Tensor& t) {
  using at::indexing::Slice;
  return at::cat({t.index({Slice(), Slice(0, at::indexing::None, 2)}), t.index({Slice(), Slice(1, at::indexing::None, 2)})}, 1);
}

}  // namespace

MoeWeights load_gpt_oss_moe(const TargetConfig& c, const GptOssLayerSource& src) {
  const int64_t E = c.moe.num_experts, H = c.hidden_size, I = c.moe.expert_intermediate;
  auto place = [&](const at::Tensor& t) { return t.to(src.device, src.dtype).contiguous(); };
  MoeWeights w;
  w.router = place(stored(src, "mlp.router.weight", {E, H}));
  w.router_bias = place(stored(src, "mlp.router.bias", {E}));
  // dequantised (float32) or stored matrices are converted once, after the reorder
  w.gate_up = place(deinterleave(expert_matrix(src, "gate_up_proj", E, 2 * I, H)));
  w.gate_up_bias = place(deinterleave(stored(src, "mlp.experts.gate_up_proj_bias", {E, 2 * I})));
  w.down = place(expert_matrix(src, "down_proj", E, H, I));
  w.down_bias = place(stored(src, "mlp.experts.down_proj_bias", {E, H}));
  return w;
}

}  // namespace dflash::models
