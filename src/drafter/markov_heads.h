// DSpark's heads (docs/DSPARK.md): the low-rank previous-token "Markov" logit bias and the confidence head, as
// a DSpark drafter's settings (src/families/dspark/dspark_drafter_settings.h) and the train config's settings, with
// DeepSpec's defaults (config/dspark/*.py) and its objective's weights. Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::drafter {

enum class MarkovHeadType { Vanilla, Gated, Rnn };
inline constexpr const char* kMarkovHeadTypeSpellings = "vanilla, gated or rnn";
std::optional<MarkovHeadType> markov_head_type_from_text(const std::string& s);
const char* markov_head_type_name(MarkovHeadType t);

// The DSpark model's heads (part of the drafter: written in its config.json, flat, as DeepSpec writes them).
struct DSparkHeads {
  int64_t markov_rank = 256;  // r: W1, W2 are [V, r]; 0 = no Markov bias (the DFlash baseline with next-token labels)
  MarkovHeadType markov_head_type = MarkovHeadType::Vanilla;
  bool enable_confidence_head = true;
  bool confidence_head_with_markov = true;  // confidence input [h; W1[p]] rather than h

  // Throws std::invalid_argument "<where>: field '<name>': expected ..., got ..." (a head type other than vanilla
  // needs markov_rank > 0: gated and rnn gate W1[p], which has no columns at rank 0).
  void validate(const std::string& where) const;
  bool operator==(const DSparkHeads& o) const {
    return markov_rank == o.markov_rank && markov_head_type == o.markov_head_type &&
           enable_confidence_head == o.enable_confidence_head &&
           confidence_head_with_markov == o.confidence_head_with_markov;
  }
  bool operator!=(const DSparkHeads& o) const { return !(*this == o); }
};

// DSpark's objective weights: L = ce * CE(gold) + l1 * L1(q, pi) + confidence * BCE (DeepSpec 0.1 / 0.9 / 1.0),
// and its decay exp(-j/gamma) over all B slots (gamma 4).
inline constexpr double kDSparkCeWeight = 0.1, kDSparkL1Weight = 0.9, kDSparkConfidenceWeight = 1.0;
inline constexpr double kDSparkGamma = 4.0;

}  // namespace dflash::drafter
