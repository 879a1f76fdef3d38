#include "kv_cache.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace dflash::models {

KVCache::KVCache(int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim, at::ScalarType dtype,
                 const std::vector<at::Device>& layer_devices)
    : KVCache(batch, capacity, kv_heads, head_dim, dtype, layer_devices, {}) {}

KVCache::KVCache(int64_t batch, int64_t capacity, int64_t kv_heads, int64_t head_dim, at::ScalarType dtype,
                 const std::vector<at::Device>& layer_devices,
                 const std::vector<std::optional<LinearStateShape>>& linear)
    : batch_(batch), capacity_(capacity) {
  if (batch <= 0 || capacity <= 0)
    throw std::invalid_argument("KVCache: batch and capacity must be positive, got " + std::to_string(batch) +
                                " and " + std::to_string(capacity));
  if (!linear.empty() && linear.size() != layer_devices.size())
    throw std::invalid_argument("KVCache: " + std::to_string(linear.size()) + " layer kinds for " +
                                std::to_string(layer_devices.size()) + " layers");
  for (size_t l = 0; l < layer_devices.size(); ++l) {
    const at::Device dev = layer_devices[l];
    if (!linear.empty() && linear[l]) {
      k_.emplace_back();
      v_.emplace_back();
      lin_.emplace_back(*linear[l], batch, dtype, dev);
      continue;
    }
    auto opts = at::TensorOptions().dtype(dtype).device(dev);
    k_.push_back(at::empty({batch, kv_heads, capacity, head_dim}, opts));
    v_.push_back(at::empty({batch, kv_heads, capacity, head_dim}, opts));
    lin_.emplace_back();
  }
}

void KVCache::crop(int64_t new_len) {
  if (new_len < 0 || new_len > length_)
    throw std::invalid_argument("KVCache::crop: new length " + std::to_string(new_len) + " must be in [0, " +
                                std::to_string(length_) + "]");
  for (const LinearState& s : lin_)  // all checks first: a refused crop leaves the cache as it was
    if (s.defined()) s.check_crop(new_len, length_);
  for (LinearState& s : lin_)
    if (s.defined()) s.crop(new_len, length_);
  length_ = new_len;
}

void KVCache::reset() {
  for (LinearState& s : lin_)
    if (s.defined()) s.reset();
  length_ = 0;
}

int64_t KVCache::linear_state_bytes() const {
  int64_t n = 0;
  for (const LinearState& s : lin_) n += s.defined() ? s.state_bytes() : 0;
  return n;
}

int64_t KVCache::rollback_bytes() const {
  int64_t n = 0;
  for (const LinearState& s : lin_) n += s.defined() ? s.rollback_bytes() : 0;
  return n;
}

std::pair<at::Tensor, at::Tensor> KVCache::store(int layer, const at::Tensor& k, const at::Tensor& v) {
  if (layer < 0 || layer >= num_layers())
    throw std::out_of_range("KVCache::store: layer " + std::to_string(layer) + " of " + std::to_string(num_layers()));
  const int64_t T = k.size(2);
  if (k.size(0) != batch_)
    throw std::invalid_argument("KVCache: batch " + std::to_string(k.size(0)) + " but the cache holds " +
                                std::to_string(batch_));
  if (length_ + T > capacity_)
    throw std::length_error("KVCache: " + std::to_string(length_) + " cached + " + std::to_string(T) +
                            " new positions exceed the capacity " + std::to_string(capacity_));
  k_[layer].narrow(2, length_, T).copy_(k);
  v_[layer].narrow(2, length_, T).copy_(v);
  return {k_[layer].narrow(2, 0, length_ + T), v_[layer].narrow(2, 0, length_ + T)};
}

void KVCache::advance(int64_t T) {
  if (length_ + T > capacity_) throw std::length_error("KVCache::advance past capacity");
  length_ += T;
}

}  // namespace dflash::models
