// Which decoder layers recompute their activations in backward (activation checkpointing): none, every layer, or
// every k-th. One spelling everywhere (train's `activation_checkpoint`, plan's and bench step's flags): none | 0 |
// layer | all | every | 1 | every:K (K >= 1) | K. Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::drafter {

struct CheckpointPolicy {
  int64_t every = 0;  // 0 = none, 1 = every layer, k = layers i with i % k == 0
  bool applies(int64_t layer) const { return every > 0 && layer % every == 0; }
  std::string name() const;  // "none", "layer", "every:K"
  bool operator==(const CheckpointPolicy&) const = default;

  // The spellings above; nullopt for anything else ("every:0" is no spelling of none).
  static std::optional<CheckpointPolicy> from_text(const std::string& s);
  // The same, throwing "checkpoint policy: expected ..., got '<s>'".
  static CheckpointPolicy parse(const std::string& s);
};

// What the spellings are, for messages: "none, layer or every:K with K >= 1".
inline constexpr const char* kCheckpointPolicySpellings = "none, layer or every:K with K >= 1";

}  // namespace dflash::drafter
