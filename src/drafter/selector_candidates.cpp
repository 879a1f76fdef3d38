#include "selector_candidates.h"

namespace dflash::drafter {

std::optional<SelectorCandidates> selector_candidates_from_text(const std::string& s) {
  if (s == "inject") return SelectorCandidates::Inject;
  if (s == "strict") return SelectorCandidates::Strict;
  return std::nullopt;
}

const char* selector_candidates_name(SelectorCandidates c) {
  return c == SelectorCandidates::Inject ? "inject" : "strict";
}

}  // namespace dflash::drafter
