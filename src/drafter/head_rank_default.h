// The default rank of a family's [V, r] head tables (DSpark's markov_rank, DFlash2's selector_rank) for a drafter
// of hidden size H: clamp(16 * round(H / 256), 32, 256). DeepSpec's published drafters use r / H of about 0.06
// (256 at H 4096); a fixed 256 put 25 M parameters of tables on a 5 M drafter at H 576. The floor keeps small
// drafters a usable head, the cap keeps the published 8B / 27B shapes (H 4096, 5120) at their published 256.
// A rank given explicitly (train setting, drafter config) always wins over this. Torch-free, header-only.
#pragma once
#include <algorithm>
#include <cstdint>

namespace dflash::drafter {

inline constexpr int64_t kHeadRankFloor = 32, kHeadRankCap = 256;

inline int64_t default_head_rank(int64_t hidden_size) {
  const int64_t steps = (std::max<int64_t>(hidden_size, 0) + 128) / 256;  // round(H / 256), halves up
  return std::clamp<int64_t>(16 * steps, kHeadRankFloor, kHeadRankCap);
}

}  // namespace dflash::drafter
