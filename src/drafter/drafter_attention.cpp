#include "drafter_attention.h"

namespace dflash::drafter {

std::vector<ops::AttentionCheckSpec> drafter_attention_specs(const DrafterConfig& c, at::Device device,
                                                             at::ScalarType dtype, const DrafterAttentionUse& use) {
  ops::AttentionCheckSpec base;
  base.device = device;
  base.dtype = dtype;
  base.context_len = use.context_len;
  base.q_heads = c.num_attention_heads;
  base.kv_heads = c.num_key_value_heads;
  base.head_dim = c.head_dim;
  base.block_size = c.block_size;
  base.packed = use.packed;
  base.backward = use.backward;
  base.seed = use.seed;
  std::vector<int64_t> windows;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) windows.push_back(c.window_for_layer(i));
  return ops::specs_for_windows(base, windows);
}

ops::AttentionChoice choose_drafter_attention(ops::AttentionBackend requested, const DrafterConfig& c,
                                              at::Device device, at::ScalarType dtype, const DrafterAttentionUse& use) {
  return ops::choose_attention_backend(requested, drafter_attention_specs(c, device, dtype, use));
}

}  // namespace dflash::drafter
