// DFlash2's grouped dynamic causal block convolution (docs/DFLASH2.md): one per
// sublayer of a DFlash2 decoder layer, wrapped around it as Conv_post(sublayer(Conv_pre(u))), with both dynamic
// kernels computed from the sublayer's (normed) input u. LibTorch ops only, so autograd comes for free.
//
//   delta = reshape(kernel_projection u, [L, 2, K, d/G])            (side, tap, group)
//   Conv(v; beta, delta)[t, c] = sum_{o<K} (beta[o, c] + delta[t, o, c / G]) * v[t - o, c]
//   v[t - o] := 0 when (t mod B) < o: taps never cross a block boundary and never reach the context.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

namespace dflash::drafter {

// One conv's trainable tensors (checkpoint names: dflash2_weight_names.h).
struct BlockConvWeights {
  at::Tensor base_kernel;        // [2, K, d]: index 0 the pre-sublayer side, 1 the post-sublayer side
  at::Tensor kernel_projection;  // [2*K*(d/G), d] (a Linear weight, no bias): output laid out (side, tap, group)
};

// A DFlash2 layer's two convs (layers.{i}.attention_conv, layers.{i}.mlp_conv).
struct LayerConvWeights {
  BlockConvWeights attention_conv, mlp_conv;
};

struct BlockConvShape {
  int64_t group_size = 16;  // G: channels sharing one dynamic coefficient; divides d
  int64_t block_size = 16;  // B: the conv restarts at every multiple of B along the sequence
};

// Throws std::invalid_argument naming `where`, the tensor and the expected shape unless `w` fits hidden size d.
void check_block_conv_weights(const BlockConvWeights& w, int64_t hidden, const BlockConvShape& s,
                              const std::string& where);

// The trainers' initialisation: base[:, 0] = 1, every other tap 0, kernel_projection 0. Both convs are then
// exactly the identity, so a DFlash2 layer computes bit for bit what the DFlash layer with the same weights does.
BlockConvWeights identity_block_conv(int64_t hidden, int64_t kernel_size, int64_t group_size, at::ScalarType dtype);

// delta [..., L, 2, K, d/G] from the sublayer input u [..., L, d].
at::Tensor conv_dynamic_kernels(const at::Tensor& u, const BlockConvWeights& w, const BlockConvShape& s);

// Conv(v; base, delta) on v [..., L, d] (L a multiple of B), base [K, d], delta [..., L, K, d/G]; the kernel is
// indexed by the OUTPUT position t.
at::Tensor grouped_dynamic_block_conv(const at::Tensor& v, const at::Tensor& base, const at::Tensor& delta,
                                      const BlockConvShape& s);

// Conv(sublayer(Conv(u; base[0], delta[:, 0])); base[1], delta[:, 1]) with delta = conv_dynamic_kernels(u).
at::Tensor conv_wrapped_sublayer(const at::Tensor& u, const BlockConvWeights& w, const BlockConvShape& s,
                                 const std::function<at::Tensor(const at::Tensor&)>& sublayer);

}  // namespace dflash::drafter
