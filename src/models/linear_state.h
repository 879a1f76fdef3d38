// What one Gated DeltaNet layer of a hybrid target carries between forwards, per cache: the conv state (the last
// K - 1 conv inputs) and the recurrent state, plus what it takes to roll both back inside the last forward.
//
// Rollback (a speculative cycle verifies B tokens and keeps the first k): the states at the start of the last
// forward are kept (the forward makes new tensors, so this costs no copy) together with that forward's per-token
// conv inputs and the normalised k, v, decay g and beta of its tokens. crop to j tokens into the forward replays
// j rank-1 updates from the start state (and takes the conv state from the kept inputs) instead of storing a
// full state per position. The per-token record is kept only for forwards of at most kRollbackTokens tokens
// (verification blocks; a long prefill's would cost far more than the states); the start states are always kept
// by forward(), so cropping back to the start of any forward works. Cropping to before the start of the last
// forward is refused (no caller needs it), except to 0 (a fresh sequence: zero states).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace dflash::models {

inline constexpr int64_t kRollbackTokens = 64;  // longest forward whose tokens crop can replay

struct LinearStateShape {
  int64_t conv_dim = 0, conv_kernel = 0;                  // channels of the conv, its kernel size K
  int64_t key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0;
};

// One forward's contribution to a layer (also what crop replays): per token, [B, ...] on the layer's device.
struct LinearRecord {
  at::Tensor conv_in;  // [B, conv_dim, T] conv inputs (model dtype)
  at::Tensor k;        // [B, T, key_heads, Dk] L2-normalised keys (state dtype)
  at::Tensor v;        // [B, T, value_heads, Dv] (state dtype)
  at::Tensor g, beta;  // [B, T, value_heads] log-decay and write strength (state dtype)
};

class LinearState {
 public:
  LinearState() = default;
  // Zero states for `batch` sequences; conv state in `dtype`, recurrent state in gdn::state_dtype(dtype).
  LinearState(const LinearStateShape& shape, int64_t batch, at::ScalarType dtype, at::Device device);

  bool defined() const { return rec_.defined(); }
  const LinearStateShape& shape() const { return shape_; }
  const at::Tensor& conv() const { return conv_; }       // [B, conv_dim, K - 1]
  const at::Tensor& recurrent() const { return rec_; }   // [B, value_heads, Dk, Dv]

  // A forward that started at position `start` (the cache length then) left these states and this record.
  // rollback = false (batched decode, whose callers never crop) keeps neither the start states nor the record.
  void commit(int64_t start, at::Tensor conv, at::Tensor rec, LinearRecord record, bool rollback = true);
  // The cache is cropped from `length` to `new_len` tokens (see the header comment). Throws std::invalid_argument
  // when new_len is before the start of the last forward (and not 0).
  void crop(int64_t new_len, int64_t length);
  void check_crop(int64_t new_len, int64_t length) const;  // throws what crop would throw, changes nothing
  void reset();  // back to zero states, nothing to roll back

  // Bytes of the live states, and of what is kept only for rollback (start states + the last record).
  int64_t state_bytes() const;
  int64_t rollback_bytes() const;

 private:
  LinearStateShape shape_;
  at::Tensor conv_, rec_;
  at::Tensor conv0_, rec0_;  // at the start of the last forward (undefined: nothing to roll back)
  LinearRecord record_;
  int64_t start_ = 0;
};

}  // namespace dflash::models
