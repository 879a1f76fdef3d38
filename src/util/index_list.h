// One grammar for lists of indices (target layer ids) wherever they are written: a settings key or flag
// ("1,9,17"; a settings file may also write [1, 9, 17]) and file metadata. Items are integers in [0, 2147483647]
// separated by commas, blanks around an item allowed, empty items skipped, no index twice. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash::util {

inline constexpr int64_t kMaxIndex = 2147483647;

// The list, or what is wrong with it, so each reader words the problem in its own terms (a settings key, a file's
// metadata) while all of them accept exactly the same text.
struct IndexList {
  std::vector<int64_t> ids;
  std::string bad_item;    // the first item that is no integer in [0, kMaxIndex]; "" when there is none
  int64_t repeated = -1;   // the first index listed twice; -1 when none
  bool ok() const { return bad_item.empty() && repeated < 0; }
};
IndexList read_index_list(const std::string& text);

// "1,9,17": how lists are written back.
std::string join_indices(const std::vector<int64_t>& ids);

}  // namespace dflash::util
