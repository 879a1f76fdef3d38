// One DFlash2 decoder layer (docs/DFLASH2.md): the DFlash layer of decoder_layer.h with
// each sublayer wrapped in its grouped dynamic block convolution. The residuals stay outside the convs:
//   x += Conv_post(attention(Conv_pre(norm_in(x))))      attention_conv; the block's Q, K, V come from the conv'd
//   x += Conv_post(mlp(Conv_pre(norm_post(x))))          mlp_conv         input, the context K/V never see a conv
#pragma once
#include <ATen/core/Tensor.h>

#include "decoder_layer.h"
#include "dynamic_block_conv.h"

namespace dflash::drafter {

// x [b, T, H] (T = N*B block tokens) -> [b, T, H]. The convs restart at every block (s.block_size) and read
// s_conv.group_size; with identity_block_conv weights this is decoder_layer(w, s, x, sh) bit for bit.
at::Tensor dflash2_decoder_layer(const LayerWeights& w, const LayerConvWeights& conv, const DecoderLayerShape& s,
                                 int64_t conv_group_size, const at::Tensor& x, const LayerShared& sh);

// Same result with activation checkpointing (checkpointed_layer.h, as decoder_layer.h's checkpointed_decoder_layer):
// forward without autograd keeping only x, the layer recomputed with autograd in backward.
at::Tensor checkpointed_dflash2_decoder_layer(const LayerWeights& w, const LayerConvWeights& conv,
                                              const DecoderLayerShape& s, int64_t conv_group_size,
                                              const at::Tensor& x, const LayerShared& sh);

}  // namespace dflash::drafter
