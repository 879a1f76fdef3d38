#include "linear_state.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "gated_deltanet.h"

namespace dflash::models {
namespace {

int64_t bytes(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

}  // namespace

LinearState::LinearState(const LinearStateShape& shape, int64_t batch, at::ScalarType dtype, at::Device device)
    : shape_(shape) {
  if (shape.conv_kernel < 1 || shape.value_heads < 1 || shape.key_heads < 1 || shape.value_heads % shape.key_heads)
    throw std::invalid_argument("LinearState: bad shape (conv kernel " + std::to_string(shape.conv_kernel) +
                                ", key heads " + std::to_string(shape.key_heads) + ", value heads " +
                                std::to_string(shape.value_heads) + ")");
  conv_ = at::zeros({batch, shape.conv_dim, shape.conv_kernel - 1}, at::TensorOptions().dtype(dtype).device(device));
  rec_ = at::zeros({batch, shape.value_heads, shape.key_head_dim, shape.value_head_dim},
                   at::TensorOptions().dtype(gdn::state_dtype(dtype)).device(device));
}

void LinearState::commit(int64_t start, at::Tensor conv, at::Tensor rec, LinearRecord record, bool rollback) {
  conv0_ = rollback ? std::move(conv_) : at::Tensor();
  rec0_ = rollback ? std::move(rec_) : at::Tensor();
  conv_ = std::move(conv);
  rec_ = std::move(rec);
  const bool keep = rollback && record.k.defined() && record.k.size(1) <= kRollbackTokens;
  record_ = keep ? std::move(record) : LinearRecord{};
  start_ = start;
}

void LinearState::reset() {
  const at::Tensor& c = conv0_.defined() ? conv0_ : conv_;
  conv_ = at::zeros_like(c);
  rec_ = at::zeros_like(rec0_.defined() ? rec0_ : rec_);
  conv0_ = rec0_ = at::Tensor();
  record_ = LinearRecord{};
  start_ = 0;
}

void LinearState::check_crop(int64_t new_len, int64_t length) const {
  if (new_len == length || new_len == 0) return;
  const int64_t T = record_.k.defined() ? record_.k.size(1) : 0;  // tokens that can be replayed
  const bool to_start = rec0_.defined() && new_len == start_;
  if (!to_start && (T == 0 || new_len < start_ || new_len > start_ + T))
    throw std::invalid_argument(
        "KVCache::crop: a hybrid target's recurrent (Gated DeltaNet) state can only be rolled back inside the last "
        "forward (from position " + std::to_string(start_) + ", at most " + std::to_string(kRollbackTokens) +
        " tokens of it, not after batched decode) or to 0; asked for " + std::to_string(new_len) + " of " +
        std::to_string(length));
}

void LinearState::crop(int64_t new_len, int64_t length) {
  check_crop(new_len, length);
  if (new_len == length) return;
  if (new_len == 0) {
    reset();
    return;
  }
  const int64_t j = new_len - start_;
  if (j == 0) {
    conv_ = conv0_;
    rec_ = rec0_;
    return;
  }
  conv_ = gdn::conv_state_after(conv0_, record_.conv_in.narrow(-1, 0, j));
  const int64_t rep = shape_.value_heads / shape_.key_heads;
  const at::Tensor k = gdn::repeat_heads(record_.k.narrow(1, 0, j), rep);
  rec_ = gdn::recurrent({}, k, record_.v.narrow(1, 0, j), record_.g.narrow(1, 0, j), record_.beta.narrow(1, 0, j), rec0_)
             .second;
}

int64_t LinearState::state_bytes() const { return bytes(conv_) + bytes(rec_); }

int64_t LinearState::rollback_bytes() const {
  return bytes(conv0_) + bytes(rec0_) + bytes(record_.conv_in) + bytes(record_.k) + bytes(record_.v) +
         bytes(record_.g) + bytes(record_.beta);
}

}  // namespace dflash::models
