#include "report_to.h"

#include <algorithm>
#include <array>

namespace dflash::train {

std::string ReportTo::text() const {
  if (trackers.empty()) return "none";
  std::string s;
  for (const auto& t : trackers) (s += s.empty() ? "" : ",") += t;
  return s;
}

std::optional<ReportTo> report_to_from_text(const std::string& text) {
  static const std::array<std::string, 4> known = {"tensorboard", "wandb", "mlflow", "swanlab"};
  ReportTo out;
  if (text.empty() || text == "none") return out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (std::find(known.begin(), known.end(), item) == known.end()) return std::nullopt;
    if (std::find(out.trackers.begin(), out.trackers.end(), item) != out.trackers.end()) return std::nullopt;
    out.trackers.push_back(item);
    start = comma + 1;
  }
  return out;
}

}  // namespace dflash::train
