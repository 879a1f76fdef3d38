#include "decoder_layer.h"

#include <vector>

#include <ATen/ATen.h>

#include "anchor_attention_op.h"
#include "checkpointed_layer.h"
#include "norm_ops.h"

namespace dflash::drafter {

at::Tensor attention_sublayer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& h,
                              const LayerShared& sh) {
  const int64_t b = h.size(0), T = h.size(1), C = sh.context.size(1);
  at::Tensor q = at::linear(h, w[kQProj]).view({b, T, s.q_heads, s.head_dim});
  q = apply_rope(rms_norm(q, w[kQNorm], s.eps), sh.q_cos, sh.q_sin);

  // Context features bypass input_layernorm, q_proj, o_proj and the MLP; they only become keys/values.
  at::Tensor k = at::cat({at::linear(sh.context, w[kKProj]), at::linear(h, w[kKProj])}, 1)
                     .view({b, C + T, s.kv_heads, s.head_dim});
  k = apply_rope(rms_norm(k, w[kKNorm], s.eps), sh.k_cos, sh.k_sin);
  const at::Tensor v = at::cat({at::linear(sh.context, w[kVProj]), at::linear(h, w[kVProj])}, 1)
                           .view({b, C + T, s.kv_heads, s.head_dim});

  const at::Tensor attn =
      ops::anchor_block_attention(q, k, v, sh.anchors, sh.keep, s.block_size, s.window, std::nullopt, sh.ctx_start,
                                  s.attention);
  return at::linear(attn.reshape({b, T, s.q_heads * s.head_dim}), w[kOProj]);
}

at::Tensor mlp_sublayer(const LayerWeights& w, const at::Tensor& h) {
  return swiglu_down(at::linear(h, w[kGateProj]), at::linear(h, w[kUpProj]), w[kDownProj]);
}

at::Tensor decoder_layer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& x, const LayerShared& sh) {
  const at::Tensor x2 = x + attention_sublayer(w, s, rms_norm(x, w[kInputNorm], s.eps), sh);
  return x2 + mlp_sublayer(w, rms_norm(x2, w[kPostNorm], s.eps));
}

namespace {

// The DFlash layer on a flat weight list (checkpointed_layer.h): its LayerWeights' tensors in order.
struct DFlashLayer {
  static at::Tensor run(const std::vector<at::Tensor>& weights, const DecoderLayerShape& s, int64_t /*arg*/,
                        const at::Tensor& x, const LayerShared& sh) {
    LayerWeights w;
    for (size_t i = 0; i < w.t.size(); ++i) w.t[i] = weights[i];
    return decoder_layer(w, s, x, sh);
  }
};

}  // namespace

at::Tensor checkpointed_decoder_layer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& x,
                                      const LayerShared& sh) {
  return checkpointed_layer<DFlashLayer>(std::vector<at::Tensor>(w.t.begin(), w.t.end()), s, 0, x, sh);
}

}  // namespace dflash::drafter
