#include "index_list.h"

#include <set>

namespace dflash::util {

IndexList read_index_list(const std::string& text) {
  IndexList out;
  std::set<int64_t> seen;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string raw = text.substr(start, comma - start);
    start = comma + 1;
    const auto b = raw.find_first_not_of(" \t"), e = raw.find_last_not_of(" \t");
    if (b == std::string::npos) continue;  // an empty item ("1,,9" or a trailing comma)
    const std::string item = raw.substr(b, e - b + 1);
    // Digits only, at most 10 of them: no sign, no overflow (a 19-digit item once overflowed a digit loop).
    bool digits = item.size() <= 10 && item.find_first_not_of("0123456789") == std::string::npos;
    const int64_t id = digits ? std::stoll(item) : -1;
    if (!digits || id > kMaxIndex) {
      out.bad_item = item;
      return out;
    }
    if (!seen.insert(id).second && out.repeated < 0) out.repeated = id;
    out.ids.push_back(id);
  }
  return out;
}

std::string join_indices(const std::vector<int64_t>& ids) {
  std::string out;
  for (const int64_t id : ids) (out += out.empty() ? "" : ",") += std::to_string(id);
  return out;
}

}  // namespace dflash::util
