#include "dflash2_layer.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpointed_layer.h"
#include "norm_ops.h"

namespace dflash::drafter {

at::Tensor dflash2_decoder_layer(const LayerWeights& w, const LayerConvWeights& conv, const DecoderLayerShape& s,
                                 int64_t conv_group_size, const at::Tensor& x, const LayerShared& sh) {
  const BlockConvShape cs{conv_group_size, s.block_size};
  const at::Tensor x2 =
      x + conv_wrapped_sublayer(rms_norm(x, w[kInputNorm], s.eps), conv.attention_conv, cs,
                                [&](const at::Tensor& h) { return attention_sublayer(w, s, h, sh); });
  return x2 + conv_wrapped_sublayer(rms_norm(x2, w[kPostNorm], s.eps), conv.mlp_conv, cs,
                                    [&](const at::Tensor& h) { return mlp_sublayer(w, h); });
}

namespace {

// The DFlash2 layer on a flat weight list (checkpointed_layer.h): the LayerWeights' tensors, then the attention
// conv's and the MLP conv's (base kernel, kernel projection); arg: the conv group size.
struct DFlash2Layer {
  static at::Tensor run(const std::vector<at::Tensor>& weights, const DecoderLayerShape& s, int64_t conv_group_size,
                        const at::Tensor& x, const LayerShared& sh) {
    LayerWeights w;
    for (size_t i = 0; i < w.t.size(); ++i) w.t[i] = weights[i];
    const size_t c = w.t.size();
    const LayerConvWeights conv{{weights[c], weights[c + 1]}, {weights[c + 2], weights[c + 3]}};
    return dflash2_decoder_layer(w, conv, s, conv_group_size, x, sh);
  }
};

}  // namespace

at::Tensor checkpointed_dflash2_decoder_layer(const LayerWeights& w, const LayerConvWeights& conv,
                                              const DecoderLayerShape& s, int64_t conv_group_size,
                                              const at::Tensor& x, const LayerShared& sh) {
  if (conv_group_size <= 0)
    throw std::invalid_argument("dflash2 layer: conv group size must be > 0, got " + std::to_string(conv_group_size));
  std::vector<at::Tensor> weights(w.t.begin(), w.t.end());
  weights.insert(weights.end(), {conv.attention_conv.base_kernel, conv.attention_conv.kernel_projection,
                                 conv.mlp_conv.base_kernel, conv.mlp_conv.kernel_projection});
  return checkpointed_layer<DFlash2Layer>(weights, s, conv_group_size, x, sh);
}

}  // namespace dflash::drafter
