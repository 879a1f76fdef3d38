#include "checkpoint_policy.h"

#include <stdexcept>

namespace dflash::drafter {

std::optional<CheckpointPolicy> CheckpointPolicy::from_text(const std::string& s) {
  if (s == "none") return CheckpointPolicy{0};
  if (s == "layer" || s == "all" || s == "every") return CheckpointPolicy{1};
  const bool every = s.rfind("every:", 0) == 0;
  const std::string k = every ? s.substr(6) : s;
  // Digits only (no sign, no blanks), at most 9 of them: no overflow.
  if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int64_t v = std::stoll(k);
  if (every && v < 1) return std::nullopt;  // "every:0" would mean "every 0th layer": not "none" in disguise
  return CheckpointPolicy{v};
}

CheckpointPolicy CheckpointPolicy::parse(const std::string& s) {
  if (const auto p = from_text(s)) return *p;
  throw std::invalid_argument(std::string("checkpoint policy: expected ") + kCheckpointPolicySpellings + ", got '" + s + "'");
}

std::string CheckpointPolicy::name() const {
  if (every == 0) return "none";
  if (every == 1) return "layer";
  return "every:" + std::to_string(every);
}

}  // namespace dflash::drafter
