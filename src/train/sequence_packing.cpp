#include "sequence_packing.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace dflash::train {

std::vector<std::vector<int64_t>> plan_rows(const std::vector<int64_t>& lengths, const std::vector<int64_t>& anchors,
                                            int64_t max_len, int64_t max_anchors) {
  if (anchors.size() != lengths.size())
    throw std::invalid_argument("pack: " + std::to_string(lengths.size()) + " sample lengths but " +
                                std::to_string(anchors.size()) + " anchor counts");
  std::vector<std::vector<int64_t>> rows;
  int64_t used = 0, drawn = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0 || lengths[i] > max_len)
      throw std::invalid_argument("pack: sample " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                                  " tokens, expected 0..max_len " + std::to_string(max_len) + " (truncate first)");
    if (anchors[i] < 0 || anchors[i] > max_anchors)
      throw std::invalid_argument("pack: sample " + std::to_string(i) + " has " + std::to_string(anchors[i]) +
                                  " anchors, expected 0..num_anchors " + std::to_string(max_anchors));
    if (rows.empty() || used + lengths[i] > max_len || drawn + anchors[i] > max_anchors) {
      rows.emplace_back();
      used = drawn = 0;
    }
    rows.back().push_back(int64_t(i));
    used += lengths[i];
    drawn += anchors[i];
  }
  return rows;
}

std::vector<int64_t> anchor_capacity(const at::Tensor& loss_mask, const std::vector<int64_t>& lengths,
                                     int64_t num_anchors) {
  const at::Tensor m = loss_mask.to(at::kBool).contiguous().cpu();
  const int64_t S = m.size(1);
  const bool* p = m.data_ptr<bool>();
  std::vector<int64_t> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    int64_t n = 0;
    for (int64_t a = 0; a + 1 < std::min(lengths[i], S); ++a) n += p[int64_t(i) * S + a] && p[int64_t(i) * S + a + 1];
    out.push_back(std::min(n, num_anchors));
  }
  return out;
}

PackedRows pack_rows(const at::Tensor& input_ids, const at::Tensor& loss_mask, const at::Tensor& features,
                     const at::Tensor& last_hidden, const std::vector<int64_t>& lengths, int64_t max_len,
                     int64_t num_anchors, int64_t pad_multiple) {
  if (input_ids.dim() != 2 || input_ids.size(0) != int64_t(lengths.size()) || loss_mask.sizes() != input_ids.sizes())
    throw std::invalid_argument("pack: input_ids and loss_mask must be [samples, S] with one length per sample");
  PackedRows p;
  p.rows = plan_rows(lengths, anchor_capacity(loss_mask, lengths, num_anchors), max_len, num_anchors);
  int64_t L = 1;
  for (const auto& r : p.rows) {
    int64_t n = 0;
    for (int64_t i : r) n += lengths[size_t(i)];
    L = std::max(L, n);
  }
  if (pad_multiple > 1) L = std::max(L, std::min(max_len, (L + pad_multiple - 1) / pad_multiple * pad_multiple));
  const int64_t R = int64_t(p.rows.size());
  p.input_ids = at::zeros({R, L}, input_ids.options());
  p.loss_mask = at::zeros({R, L}, loss_mask.options());
  if (features.defined()) p.features = at::zeros({R, L, features.size(2)}, features.options());
  if (last_hidden.defined()) p.last_hidden = at::zeros({R, L, last_hidden.size(2)}, last_hidden.options());
  p.doc_start = at::empty({R, L}, at::kLong);
  int64_t* ds = p.doc_start.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    int64_t at_pos = 0;
    for (int64_t i : p.rows[size_t(r)]) {
      const int64_t n = lengths[size_t(i)];
      p.input_ids[r].narrow(0, at_pos, n).copy_(input_ids[i].narrow(0, 0, n));
      p.loss_mask[r].narrow(0, at_pos, n).copy_(loss_mask[i].narrow(0, 0, n));
      if (features.defined()) p.features[r].narrow(0, at_pos, n).copy_(features[i].narrow(0, 0, n));
      if (last_hidden.defined()) p.last_hidden[r].narrow(0, at_pos, n).copy_(last_hidden[i].narrow(0, 0, n));
      std::fill(ds + r * L + at_pos, ds + r * L + at_pos + n, at_pos);
      at_pos += n;
    }
    std::fill(ds + r * L + at_pos, ds + (r + 1) * L, at_pos);  // padding: a run of its own, never in the loss
  }
  return p;
}

}  // namespace dflash::train
