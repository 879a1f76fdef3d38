#include "gpt_oss_weights.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

#include "finite_weights.h"
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
  check_finite_weight(t, t, n);  // as stored, in its own layout (the index names the stored element)
  return t;
}

// An expert matrix in the [E, out, in] layout of moe_block.h: from its MXFP4 blocks and scales (stored
// [E, out, in / 32, 16] and [E, out, in / 32]), else from transformers' fused [E, in, out] tensor.
at::Tensor expert_matrix(const GptOssLayerSource& src, const std::string& proj, int64_t E, int64_t out, int64_t in) {
  const std::string blocks = "mlp.experts." + proj + "_blocks", scales = "mlp.experts." + proj + "_scales";
  const std::string plain = "mlp.experts." + proj;
  if ((src.has(blocks) || src.has(scales)) && src.has(plain))  // one would be dropped without a word
    throw std::runtime_error("target weights: '" + src.name(plain) + "' is stored twice: as a plain tensor and as MXFP4 '" +
                             src.name(src.has(blocks) ? blocks : scales) +
                             "' (two encodings of the same weights; keep one)");
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
    const at::Tensor w = mxfp4_dequantize(b, s, src.name(plain));
    check_finite_weight(w, w, src.name(plain),
                        " after dequantising its MXFP4 '_blocks' x '_scales' (index [expert, row, column]; a scale "
                        "byte of 254 overflows float32)");
    return w;
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
  // Finite as stored or dequantised (checked above); here the conversion to the model's dtype must keep them so.
  auto place = [&](const at::Tensor& t, const std::string& suffix) {
    at::Tensor held = t.to(src.device, src.dtype).contiguous();
    check_finite_weight(held, t, src.name(suffix));
    return held;
  };
  MoeWeights w;
  w.router = place(stored(src, "mlp.router.weight", {E, H}), "mlp.router.weight");
  w.router_bias = place(stored(src, "mlp.router.bias", {E}), "mlp.router.bias");
  // dequantised (float32) or stored matrices are converted once, after the reorder
  w.gate_up = place(deinterleave(expert_matrix(src, "gate_up_proj", E, 2 * I, H)), "mlp.experts.gate_up_proj");
  w.gate_up_bias = place(deinterleave(stored(src, "mlp.experts.gate_up_proj_bias", {E, 2 * I})),
                         "mlp.experts.gate_up_proj_bias");
  w.down = place(expert_matrix(src, "down_proj", E, H, I), "mlp.experts.down_proj");
  w.down_bias = place(stored(src, "mlp.experts.down_proj_bias", {E, H}), "mlp.experts.down_proj_bias");
  return w;
}

}  // namespace dflash::models
