#include "dflash2_layer.h"

#include <ATen/ATen.h>

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

}  // namespace dflash::drafter
