#include "dynamic_block_conv.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

namespace dflash::drafter {

namespace {

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_shape(const BlockConvShape& s, const std::string& where) {
  if (s.group_size <= 0) throw std::invalid_argument(where + ": conv group size must be > 0, got " + std::to_string(s.group_size));
  if (s.block_size <= 0) throw std::invalid_argument(where + ": block size must be > 0, got " + std::to_string(s.block_size));
}

}  // namespace

void check_block_conv_weights(const BlockConvWeights& w, int64_t hidden, const BlockConvShape& s,
                              const std::string& where) {
  check_shape(s, where);
  if (hidden % s.group_size != 0)
    throw std::invalid_argument(where + ": conv group size " + std::to_string(s.group_size) +
                                " must divide the hidden size " + std::to_string(hidden));
  if (!w.base_kernel.defined() || w.base_kernel.dim() != 3 || w.base_kernel.size(0) != 2 ||
      w.base_kernel.size(1) < 1 || w.base_kernel.size(2) != hidden)
    throw std::invalid_argument(where + ": base_kernel must be [2, K, " + std::to_string(hidden) + "] with K >= 1, got " +
                                (w.base_kernel.defined() ? shape_text(w.base_kernel.sizes()) : "none"));
  const int64_t rows = 2 * w.base_kernel.size(1) * (hidden / s.group_size);
  if (!w.kernel_projection.defined() || w.kernel_projection.sizes() != at::IntArrayRef({rows, hidden}))
    throw std::invalid_argument(where + ": kernel_projection.weight must be [" + std::to_string(rows) + ", " +
                                std::to_string(hidden) + "] (2*K*d/G, d), got " +
                                (w.kernel_projection.defined() ? shape_text(w.kernel_projection.sizes()) : "none"));
}

BlockConvWeights identity_block_conv(int64_t hidden, int64_t kernel_size, int64_t group_size, at::ScalarType dtype) {
  if (kernel_size < 1 || group_size < 1 || hidden % group_size != 0)
    throw std::invalid_argument("identity_block_conv: need kernel size >= 1 and a group size dividing the hidden size " +
                                std::to_string(hidden) + ", got K=" + std::to_string(kernel_size) +
                                ", G=" + std::to_string(group_size));
  const auto opts = at::TensorOptions().dtype(dtype);
  BlockConvWeights w;
  w.base_kernel = at::zeros({2, kernel_size, hidden}, opts);
  w.base_kernel.select(1, 0).fill_(1.0);
  w.kernel_projection = at::zeros({2 * kernel_size * (hidden / group_size), hidden}, opts);
  return w;
}

at::Tensor conv_dynamic_kernels(const at::Tensor& u, const BlockConvWeights& w, const BlockConvShape& s) {
  check_block_conv_weights(w, u.size(-1), s, "dynamic block conv");
  std::vector<int64_t> shape(u.sizes().begin(), u.sizes().end() - 1);
  shape.insert(shape.end(), {2, w.base_kernel.size(1), u.size(-1) / s.group_size});
  return at::linear(u, w.kernel_projection).view(shape);
}

at::Tensor grouped_dynamic_block_conv(const at::Tensor& v, const at::Tensor& base, const at::Tensor& delta,
                                      const BlockConvShape& s) {
  check_shape(s, "dynamic block conv");
  if (v.dim() < 2) throw std::invalid_argument("dynamic block conv: input must be [..., L, d], got " + shape_text(v.sizes()));
  const int64_t L = v.size(-2), d = v.size(-1), G = s.group_size, B = s.block_size;
  if (d % G != 0 || L % B != 0)
    throw std::invalid_argument("dynamic block conv: input " + shape_text(v.sizes()) + " needs L a multiple of the block size " +
                                std::to_string(B) + " and d a multiple of the group size " + std::to_string(G));
  const int64_t groups = d / G;
  if (base.dim() != 2 || base.size(1) != d)
    throw std::invalid_argument("dynamic block conv: base kernel must be [K, " + std::to_string(d) + "], got " +
                                shape_text(base.sizes()));
  const int64_t K = base.size(0);
  std::vector<int64_t> want(v.sizes().begin(), v.sizes().end() - 1);
  want.insert(want.end(), {K, groups});
  if (delta.sizes() != at::IntArrayRef(want))
    throw std::invalid_argument("dynamic block conv: dynamic kernels must be " + shape_text(want) + ", got " +
                                shape_text(delta.sizes()));

  // Blocks on their own axis, so shifting by a tap pads each block's front with zeros instead of reading the
  // previous block. A tap o >= B would read only padding: it contributes nothing and is skipped.
  const at::Tensor blocks = v.reshape({-1, L / B, B, d});
  at::Tensor out;
  for (int64_t o = 0; o < std::min(K, B); ++o) {
    const at::Tensor shifted = o == 0 ? blocks : at::constant_pad_nd(blocks.narrow(2, 0, B - o), {0, 0, o, 0});
    const at::Tensor grouped = shifted.reshape({-1, L, groups, G});
    // z-lab's order of operations (out + base*v, then + delta*v), so bf16 rounds as the released drafters do.
    const at::Tensor static_term = base[o].view({groups, G}) * grouped;
    out = out.defined() ? out + static_term : static_term;
    out = out + delta.select(-2, o).reshape({-1, L, groups, 1}) * grouped;
  }
  return out.reshape(v.sizes());
}

at::Tensor conv_wrapped_sublayer(const at::Tensor& u, const BlockConvWeights& w, const BlockConvShape& s,
                                 const std::function<at::Tensor(const at::Tensor&)>& sublayer) {
  const at::Tensor delta = conv_dynamic_kernels(u, w, s);  // [..., L, 2, K, groups]
  const at::Tensor pre = grouped_dynamic_block_conv(u, w.base_kernel[0], delta.select(-3, 0), s);
  return grouped_dynamic_block_conv(sublayer(pre), w.base_kernel[1], delta.select(-3, 1), s);
}

}  // namespace dflash::drafter
