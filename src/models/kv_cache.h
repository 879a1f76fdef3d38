// Per-layer key/value cache for the target, preallocated to a fixed capacity. One length for all layers:
// a forward of T tokens writes positions [length, length + T) and then advances it; crop() rolls back
// (speculative decoding: drop the rejected tail of a verified block). A hybrid target's Gated DeltaNet layers
// hold no K/V but a LinearState (conv + recurrent state) each, which crop() rolls back too (linear_state.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "linear_state.h"

namespace dflash::models {

class KVCache {
 public:
  KVCache() = default;
  // Layer l's K and V are [batch, kv_heads, capacity, head_dim] on devices[l].
  KVCache(int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim, at::ScalarType dtype,
          const std::vector<at::Device>& layer_devices);
  // Hybrid: layer l is a Gated DeltaNet layer when linear[l] is set (no K/V storage, a LinearState instead).
  KVCache(int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim, at::ScalarType dtype,
          const std::vector<at::Device>& layer_devices, const std::vector<std::optional<LinearStateShape>>& linear);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  int num_layers() const { return static_cast<int>(k_.size()); }

  // Keeps the first new_len positions; throws unless 0 <= new_len <= length() (and, with Gated DeltaNet layers,
  // new_len is 0 or inside the last forward: see linear_state.h).
  void crop(int64_t new_len);
  void reset();

  bool is_linear(int layer) const { return lin_.at(size_t(layer)).defined(); }
  LinearState& linear(int layer) { return lin_.at(size_t(layer)); }
  const LinearState& linear(int layer) const { return lin_.at(size_t(layer)); }
  // Bytes of the Gated DeltaNet states, and of what they keep for rollback (0 without such layers).
  int64_t linear_state_bytes() const;
  int64_t rollback_bytes() const;

  // For the model's forward: store T new positions of layer `layer` at [length, length + T) and return
  // views of all [0, length + T) positions. advance(T) is called once every layer has stored.
  std::pair<at::Tensor, at::Tensor> store(int layer, const at::Tensor& k, const at::Tensor& v);
  void advance(int64_t T);
  // Layer `layer`'s whole storage ([batch, kv_heads, capacity, head_dim]), for kernels that write new
  // positions themselves (batched_decode_attention); positions >= length() hold no data.
  const at::Tensor& keys(int layer) const { return k_.at(size_t(layer)); }
  const at::Tensor& values(int layer) const { return v_.at(size_t(layer)); }

 private:
  int64_t batch_ = 0, capacity_ = 0, length_ = 0;
  std::vector<at::Tensor> k_, v_;  // undefined for Gated DeltaNet layers
  std::vector<LinearState> lin_;   // defined only for Gated DeltaNet layers
};

}  // namespace dflash::models
