// The candidate selector's objective settings (docs/DFLASH2.md "The objective"), below the families layer because
// the selector's loss (candidate_selector.h) reads them: which candidate set the selector's CE uses for a gold token
// outside the top-K, and the term's default weight alpha (all three trainers: 1). The model's own settings live
// with the family that has a selector. Torch-free.
#pragma once
#include <optional>
#include <string>

namespace dflash::drafter {

// Inject (speculators #1006): a gold token outside the top-K takes rank K's place for the loss, every row counts.
// Strict (SpecForge main): the serving top-K is kept and a miss gives no gradient. Strict is the default
// (docs/DFLASH2.md "The objective" says why).
enum class SelectorCandidates { Inject, Strict };
inline constexpr const char* kSelectorCandidatesSpellings = "inject or strict";
inline constexpr SelectorCandidates kDefaultSelectorCandidates = SelectorCandidates::Strict;
std::optional<SelectorCandidates> selector_candidates_from_text(const std::string& s);
const char* selector_candidates_name(SelectorCandidates c);

inline constexpr double kDefaultSelectorLossWeight = 1.0;  // alpha in L = L_unary + alpha L_sel

}  // namespace dflash::drafter
