// Activation checkpointing of a decoder layer given on a flat weight list: the forward runs without autograd and
// keeps only its inputs; backward recomputes the layer with autograd and returns exactly its contributions. One
// template for every family's layer (decoder_layer.cpp's DFlash layer, a family's own in its folder), so that a
// family's layer needs nothing of the drafter layer but this header.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "decoder_layer.h"

namespace dflash::drafter {

// Layer: a type with
//   static at::Tensor run(const std::vector<at::Tensor>& weights, const DecoderLayerShape& s, int64_t arg,
//                         const at::Tensor& x, const LayerShared& sh);
// weights: the layer's tensors (the LayerWeights first, then the family's); arg: one integer the layer reads
// beyond the shape (DFlash2: its conv group size; 0 when unused).
template <class Layer>
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer<Layer>> {
 public:
  static constexpr size_t kFixedInputs = 9;  // x, context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& context,
                            const at::Tensor& q_cos, const at::Tensor& q_sin, const at::Tensor& k_cos,
                            const at::Tensor& k_sin, const at::Tensor& anchors, const at::Tensor& keep,
                            const at::Tensor& ctx_start, at::TensorList weights, int64_t q_heads, int64_t kv_heads,
                            int64_t head_dim, int64_t block_size, int64_t window, double eps, int64_t attention,
                            int64_t arg) {
    const DecoderLayerShape s{q_heads, kv_heads, head_dim, block_size, window, eps,
                              ops::attention_backend_of_code(attention)};
    at::Tensor y;
    {
      at::NoGradGuard no_grad;
      y = Layer::run(weights.vec(), s, arg, x, LayerShared{context, q_cos, q_sin, k_cos, k_sin, anchors, keep, ctx_start});
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
    ctx->saved_data["arg"] = arg;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
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
    const at::Tensor y = Layer::run(w, s, ctx->saved_data["arg"].toInt(), x,
                                    LayerShared{context, saved[2], saved[3], saved[4], saved[5], saved[6], saved[7],
                                                saved[8]});

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
    torch::autograd::variable_list result(kFixedInputs + w.size() + 8);
    if (!wrt.empty()) {
      const auto g = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
      for (size_t i = 0; i < g.size(); ++i) result[size_t(slot[i])] = g[i];
    }
    return result;
  }
};

// Layer::run(weights, s, arg, x, sh) checkpointed: the same result, only x (and the inputs) kept for backward.
template <class Layer>
at::Tensor checkpointed_layer(const std::vector<at::Tensor>& weights, const DecoderLayerShape& s, int64_t arg,
                              const at::Tensor& x, const LayerShared& sh) {
  // ctx_start travels as a tensor (zeros when absent: the same mask) so the saved list has a fixed layout.
  const at::Tensor cs = sh.ctx_start.defined() ? sh.ctx_start : at::zeros_like(sh.anchors);
  return CheckpointedLayer<Layer>::apply(x, sh.context, sh.q_cos, sh.q_sin, sh.k_cos, sh.k_sin, sh.anchors, sh.keep,
                                         cs, at::TensorList(weights), s.q_heads, s.kv_heads, s.head_dim, s.block_size,
                                         s.window, s.eps, ops::attention_backend_code(s.attention), arg);
}

}  // namespace dflash::drafter
