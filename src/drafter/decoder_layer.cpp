#include "decoder_layer.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "anchor_attention_op.h"
#include "dflash2_layer.h"
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

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr size_t kFixedInputs = 9;  // x, context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start

// The layer on a flat weight list: the DFlash layer's tensors, then (conv_group_size > 0) DFlash2's convs.
at::Tensor layer_from_list(const std::vector<at::Tensor>& weights, const DecoderLayerShape& s,
                           int64_t conv_group_size, const at::Tensor& x, const LayerShared& sh) {
  LayerWeights w;
  for (size_t i = 0; i < w.t.size(); ++i) w.t[i] = weights[i];
  if (conv_group_size <= 0) return decoder_layer(w, s, x, sh);
  const size_t c = w.t.size();
  const LayerConvWeights conv{{weights[c], weights[c + 1]}, {weights[c + 2], weights[c + 3]}};
  return dflash2_decoder_layer(w, conv, s, conv_group_size, x, sh);
}

class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& context,
                            const at::Tensor& q_cos, const at::Tensor& q_sin, const at::Tensor& k_cos,
                            const at::Tensor& k_sin, const at::Tensor& anchors, const at::Tensor& keep,
                            const at::Tensor& ctx_start, at::TensorList weights, int64_t q_heads, int64_t kv_heads,
                            int64_t head_dim, int64_t block_size, int64_t window, double eps, int64_t attention,
                            int64_t conv_group_size) {
    const DecoderLayerShape s{q_heads, kv_heads, head_dim, block_size, window, eps, ops::attention_backend_of_code(attention)};
    at::Tensor y;
    {
      at::NoGradGuard no_grad;
      y = layer_from_list(weights.vec(), s, conv_group_size, x,
                          LayerShared{context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start});
    }
    std::vector<at::Tensor> saved = {x, context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["q_heads"] = q_heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["block_size"] = block_size;
    ctx->saved_data["window"] = window;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["attention"] = attention;
    ctx->saved_data["conv_group_size"] = conv_group_size;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const DecoderLayerShape s{ctx->saved_data["q_heads"].toInt(), ctx->saved_data["kv_heads"].toInt(),
                       ctx->saved_data["head_dim"].toInt(), ctx->saved_data["block_size"].toInt(),
                       ctx->saved_data["window"].toInt(), ctx->saved_data["eps"].toDouble(),
                       ops::attention_backend_of_code(ctx->saved_data["attention"].toInt())};
    at::AutoGradMode grad_on(true);
    // Fresh leaves for the recomputation, so grad() returns exactly this layer's contributions.
    auto leaf = [](const at::Tensor& t) { return t.detach().requires_grad_(t.requires_grad()); };
    const at::Tensor x = leaf(saved[0]);
    const at::Tensor context = leaf(saved[1]);
    std::vector<at::Tensor> w;
    for (size_t i = kFixedInputs; i < saved.size(); ++i) w.push_back(leaf(saved[i]));
    const at::Tensor y = layer_from_list(w, s, ctx->saved_data["conv_group_size"].toInt(), x,
                                         LayerShared{context, saved[2], saved[3], saved[4], saved[5], saved[6], saved[7], saved[8]});

    std::vector<at::Tensor> wrt;
    std::vector<int> slot;  // index into the result list for each entry of wrt
    auto want = [&](const at::Tensor& t, int at_slot) {
      if (t.requires_grad()) {
        wrt.push_back(t);
        slot.push_back(at_slot);
      }
    };
    want(x, 0);
    want(context, 1);
    for (size_t i = 0; i < w.size(); ++i) want(w[i], int(kFixedInputs + i));

    // One result per forward argument: 9 tensors, the weight list (flattened), then 8 non-tensor args.
    variable_list result(kFixedInputs + w.size() + 8);
    if (!wrt.empty()) {
      const auto g = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
      for (size_t i = 0; i < g.size(); ++i) result[size_t(slot[i])] = g[i];
    }
    return result;
  }
};

}  // namespace

at::Tensor checkpointed_decoder_layer(const LayerWeights& w, const DecoderLayerShape& s, const at::Tensor& x,
                                      const LayerShared& sh) {
  // ctx_start travels as a tensor (zeros when absent: the same mask) so the saved list has a fixed layout.
  const at::Tensor cs = sh.ctx_start.defined() ? sh.ctx_start : at::zeros_like(sh.anchors);
  return CheckpointedLayer::apply(x, sh.context, sh.q_cos, sh.q_sin, sh.k_cos, sh.k_sin, sh.anchors, sh.keep, cs,
                                  at::TensorList(w.t.data(), w.t.size()), s.q_heads, s.kv_heads, s.head_dim,
                                  s.block_size, s.window, s.eps, ops::attention_backend_code(s.attention),
                                  int64_t(0));
}

at::Tensor checkpointed_dflash2_decoder_layer(const LayerWeights& w, const LayerConvWeights& conv,
                                              const DecoderLayerShape& s, int64_t conv_group_size,
                                              const at::Tensor& x, const LayerShared& sh) {
  if (conv_group_size <= 0)
    throw std::invalid_argument("dflash2 layer: conv group size must be > 0, got " + std::to_string(conv_group_size));
  std::vector<at::Tensor> weights(w.t.begin(), w.t.end());
  weights.insert(weights.end(), {conv.attention_conv.base_kernel, conv.attention_conv.kernel_projection,
                                 conv.mlp_conv.base_kernel, conv.mlp_conv.kernel_projection});
  const at::Tensor cs = sh.ctx_start.defined() ? sh.ctx_start : at::zeros_like(sh.anchors);
  return CheckpointedLayer::apply(x, sh.context, sh.q_cos, sh.q_sin, sh.k_cos, sh.k_sin, sh.anchors, sh.keep, cs,
                                  at::TensorList(weights), s.q_heads, s.kv_heads, s.head_dim, s.block_size, s.window,
                                  s.eps, ops::attention_backend_code(s.attention), conv_group_size);
}

}  // namespace dflash::drafter
