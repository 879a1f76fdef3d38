#include "dflash2_plan_terms.h"

#include <algorithm>

namespace dflash::plan {

DFlash2PlanBytes dflash2_plan_bytes(const drafter::DrafterConfig& c, double T, double e, double chunk_rows) {
  DFlash2PlanBytes b;
  if (c.family != drafter::DrafterFamily::DFlash2) return b;
  const double d = double(c.hidden_size), B = double(c.block_size), Kc = double(c.dflash2.conv_kernel_size),
               G = double(c.dflash2.conv_group_size), K = double(c.dflash2.selector_top_k),
               r = double(c.dflash2.selector_rank);
  // Per site: delta (2 K d/G), the pre-conv output, the sublayer output and the post-conv output (d each), and
  // each of its two convs' zero-padded shifted inputs, one per tap 1..min(K, B)-1 (dynamic_block_conv.cpp: saved
  // by the tap's products).
  const double shifted = 2 * (std::min(Kc, B) - 1) * d;
  b.conv_saved_per_layer = 2 * T * (2 * Kc * d / G + 3 * d + shifted) * e;
  const double rows = T * (B - 1) / B;  // drafted slots
  b.selector_saved = rows * (K * r + 3 * r) * e + rows * K * (4 + 8 + 4);
  const double chunk = std::min(rows, std::max(B - 1, chunk_rows));
  b.selector_chunk = chunk * std::min(double(c.vocab_size), 8192.0) * 4 * 2;
  b.selector_params = r * d + 2 * double(c.vocab_size) * r;
  return b;
}

}  // namespace dflash::plan
